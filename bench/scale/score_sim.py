#!/usr/bin/env python3
"""Scores `netprism analyze --json` output against netprism-sim's truth JSON.

Jobs are matched by node set (exact). Parallelism must match exactly: dp, pp, dp_groups (as sets of sets) and
stages (ordered, each stage as a set). Iterations are matched by time, not index: each reported iteration end
is paired with the nearest truth iteration end (the end of the DP synchronisation, the job-visible boundary),
and the duration error is |reported - truth| / truth over the paired iterations, skipping the first two.
Prints a table; exits 1 when structure differs or the median error exceeds --max-median-error."""
import argparse, bisect, json, statistics, sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--truth", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--max-median-error", type=float, default=0.003)
    a = ap.parse_args()
    truth = json.load(open(a.truth))["jobs"]
    result = json.load(open(a.result))["jobs"]
    by_nodes = {frozenset(j["nodes"]): j for j in result}
    ok = True
    rows = []
    for t in truth:
        r = by_nodes.get(frozenset(t["nodes"]))
        if r is None:
            print(f"{t['id']}: MISSING (no reported job with its {len(t['nodes'])} nodes)")
            ok = False
            continue
        p = r.get("parallelism", {})
        same = (p.get("dp") == t["dp"] and p.get("pp") == t["pp"]
                and {frozenset(g) for g in p.get("dp_groups", [])} == {frozenset(g) for g in t["dp_groups"]}
                and [frozenset(s) for s in p.get("stages", [])] == [frozenset(s) for s in t["stages"]])
        ends = [i["end_ns"] for i in t["iterations"]]
        errs = []
        for it in r.get("iterations", []):
            k = bisect.bisect_left(ends, it["end_ns"])
            cand = [c for c in (k - 1, k) if 0 <= c < len(ends)]
            if not cand:
                continue
            c = min(cand, key=lambda c: abs(ends[c] - it["end_ns"]))
            if c < 2:
                continue
            td = t["iterations"][c]["duration_ns"]
            errs.append(abs(it["duration_ns"] - td) / td)
        med = statistics.median(errs) if errs else float("nan")
        p95 = sorted(errs)[int(0.95 * (len(errs) - 1))] if errs else float("nan")
        rows.append((t["id"], len(t["nodes"]), t["dp"], t["pp"], same, len(t["iterations"]), len(r.get("iterations", [])), med, p95))
        ok &= same and bool(errs) and med <= a.max_median_error
    extra = len(result) - sum(1 for t in truth if frozenset(t["nodes"]) in by_nodes)
    print(f"{'job':8} {'nodes':>5} {'dp':>4} {'pp':>3} {'par_ok':>6} {'iters':>5} {'seen':>5} {'med_err%':>8} {'p95_err%':>8}")
    for r in rows:
        print(f"{r[0]:8} {r[1]:5} {r[2]:4} {r[3]:3} {str(r[4]):>6} {r[5]:5} {r[6]:5} {100*r[7]:8.3f} {100*r[8]:8.3f}")
    if extra:
        print(f"extra jobs reported: {extra}")
        ok = False
    print("score:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
