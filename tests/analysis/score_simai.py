#!/usr/bin/python3
"""Score netprism's analysis of a SimAI flow export against the simulator's own truth.

A SimAI dataset directory holds (see tests/data/simai_*/README.md):
  flows.csv         netprism's flow CSV import format, one row per RDMA message
  topology.txt      `IP NODE` lines (every GPU NIC -> its server)
  truth_nodes.json  {"jobs": [{"name", "nodes", "dp", "pp", "stages", "dp_groups", "iteration_end_ns"}, ...]}
                    at node (server) level, as `netprism job` reports it; optional "faults": [...]

  score_simai.py DATASET_DIR (--json FILE | --netprism PATH) [--max-median-err PCT] [--allow-findings]

What is checked, per truth job (exit status 1 on any failure):
  grouping     a netprism job with exactly the truth job's nodes; no netprism job left over
  structure    dp, pp, dp_groups (as sets of node sets) and stages (in order) equal to the truth's
  iterations   every truth iteration after the first is found: a netprism iteration whose start and end
               match the truth's boundaries B_{i-1}, B_i. SimAI logs an iteration's end when its gradient
               collective is issued, netprism ends an iteration when the synchronisation is over (contracts.md):
               the two conventions differ by the synchronisation's duration, a constant of the job. That
               offset is estimated as the median over truth boundaries of the distance to the nearest netprism
               boundary, and boundaries match when within a quarter of the median truth step after removing it.
               Truth iteration 0 (from the simulation's start, with no synchronisation before it) is not scored.
  durations    median relative duration error over the matched iterations <= --max-median-err (0.3 %)
  extra        no netprism iteration that matches no truth iteration (a split or merged iteration)
  findings     none on a healthy run (no "faults" in the truth), unless --allow-findings
"""
import argparse
import json
import statistics
import subprocess
import sys


def load_answer(args):
    if args.json:
        with open(args.json) as f:
            return json.load(f)
    d = args.dataset
    out = subprocess.run([args.netprism, "analyze", "--input", f"{d}/flows.csv", "--format", "csv", "--topology",
                          f"{d}/topology.txt", "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def score_job(t, j, max_median_err, allow_findings, faults):
    ok = True

    def line(what, truth, got, good):
        nonlocal ok
        ok = ok and good
        print(f"  {what:<16} truth {str(truth):<40} netprism {str(got):<40} {'ok' if good else 'FAIL'}")

    p = j.get("parallelism", {})
    line("dp", t["dp"], p.get("dp"), t["dp"] == p.get("dp"))
    line("pp", t["pp"], p.get("pp"), t["pp"] == p.get("pp"))
    tg = sorted(sorted(g) for g in t["dp_groups"])
    ng = sorted(sorted(g) for g in p.get("dp_groups", []))
    line("dp_groups", tg, ng, tg == ng)
    if "stages" in t:
        ts = [sorted(s) for s in t["stages"]]
        ns = [sorted(s) for s in p.get("stages", [])]
        line("stages", ts, ns, ts == ns)

    ends = list(t["iteration_end_ns"])
    steps = [b - a for a, b in zip(ends, ends[1:])]
    its = j.get("iterations", [])
    if not steps or not its:
        line("iterations", len(ends), len(its), False)
        return False
    T = statistics.median(steps)
    nb = sorted({i["start_ns"] for i in its} | {i["end_ns"] for i in its})
    offset = statistics.median(min(nb, key=lambda x: abs(x - b)) - b for b in ends)

    def truth_index(x):
        k = min(range(len(ends)), key=lambda i: abs(x - offset - ends[i]))
        return k if abs(x - offset - ends[k]) <= T / 4 else None

    matched, errs, extra = {}, [], 0
    for i in its:
        a, b = truth_index(i["start_ns"]), truth_index(i["end_ns"])
        if a is None or b is None or b != a + 1:
            extra += 1
            continue
        matched[b] = i
        truth_d = ends[b] - ends[a]
        errs.append(abs(i["duration_ns"] - truth_d) / truth_d * 100)
    missing = [k for k in range(1, len(ends)) if k not in matched]
    print(f"  iterations       truth {len(ends)} (step median {T / 1e6:.1f} ms), netprism {len(its)}, matched "
          f"{len(matched)}, missing {len(missing)} {missing if missing else ''}, extra {extra} "
          f"(boundary offset {offset / 1e6:+.2f} ms: netprism's sync end vs the truth's iteration end)")
    ok = ok and not missing and extra == 0
    med = statistics.median(errs) if errs else float("inf")
    good = med <= max_median_err
    ok = ok and good
    print(f"  duration error   median {med:.3f} % max {max(errs) if errs else float('inf'):.3f} % "
          f"(<= {max_median_err} %) {'ok' if good else 'FAIL'}")
    fs = j.get("findings", [])
    if faults:
        print(f"  findings         faults in truth {faults}: reported {[(f['kind'], f['subject']) for f in fs]}")
    else:
        good = allow_findings or not fs
        ok = ok and good
        print(f"  findings         none expected, reported {[(f['kind'], f['subject']) for f in fs]} "
              f"{'ok' if good else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--json")
    src.add_argument("--netprism")
    ap.add_argument("--max-median-err", type=float, default=0.3)
    ap.add_argument("--allow-findings", action="store_true")
    args = ap.parse_args()
    with open(f"{args.dataset}/truth_nodes.json") as f:
        truth = json.load(f)
    answer = load_answer(args)
    jobs = list(answer.get("jobs", []))
    ok = True
    for t in truth["jobs"]:
        nodes = sorted(t["nodes"])
        j = next((x for x in jobs if sorted(x["nodes"]) == nodes), None)
        print(f"== {t['name']} ({len(nodes)} nodes) vs netprism job {j['id'] if j else None}")
        if j is None:
            print(f"  grouping         truth {nodes}: no netprism job with exactly these nodes FAIL "
                  f"(netprism: {[sorted(x['nodes']) for x in jobs]})")
            ok = False
            continue
        jobs.remove(j)
        print(f"  grouping         truth {nodes} ok")
        ok = score_job(t, j, args.max_median_err, args.allow_findings, t.get("faults", [])) and ok
    for x in jobs:
        print(f"== extra netprism job {x['id']} on {sorted(x['nodes'])} FAIL")
        ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
