#!/usr/bin/python3
"""The alarms campaign (issue 22, trustworthy alarms): fresh testbed runs of healthy jobs, benign events and a
2x degraded host link, `netprism analyze` on each capture, and the counts the acceptance asks for.

  alarms.py run --netprism PATH [--keep DIR] [--sets healthy,benign,slowlink] [--only NAME...]
  alarms.py record --out DIR [--sets ...] [--only NAME...]    runs only, kept in DIR/<name>
  alarms.py score DIR... --netprism PATH                       counts over recorded runs (DIR or DIR/<name>)

Acceptance (exit 1 when it does not hold):
  healthy:  20 runs of mixed shapes (DP, DP x PP, PP, TP, DDP, OpenMPI; 2-6 nodes), every other one under host
            CPU load (`cpuload` burners), some on line-rate-shaped links: zero findings in every run.
  benign:   10 runs with a checkpoint-like pause of every rank (1-3 s, at varying iterations), plus evaluation
            phases (forward-only passes and a loss all-reduce) and a second job starting later: zero findings.
  slowlink: 10 runs on links shaped to a line rate (400 mbit/s, `--link-rate`) with one node's link at half of
            it from iteration 6: a slow_link finding naming that node within 5 iterations of the onset in 9 of 10.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import score  # noqa: E402

PY = "/usr/bin/python3"
LOAD = ["--fault", "cpuload:workers=3"]  # 3 burners beside the ranks on the 2 cores: load average ~4-6
LINE = ["--link-rate", "400mbit"]

SHAPES = [
    ("dp2", ["--dp", "2", "--pp", "1"]),
    ("dp4", ["--dp", "4", "--pp", "1"]),
    ("dp2pp2", ["--dp", "2", "--pp", "2"]),
    ("dp2pp2_gpipe", ["--dp", "2", "--pp", "2", "--schedule", "gpipe"]),
    ("pp2", ["--dp", "1", "--pp", "2", "--micro-batches", "6", "--fwd-ms", "20"]),
    ("pp4", ["--dp", "1", "--pp", "4"]),
    ("dp3pp2", ["--dp", "3", "--pp", "2", "--fwd-ms", "40"]),
    ("dp2pp2tp2", ["--dp", "2", "--pp", "2", "--tp", "2"]),
    ("ddp4", ["--ddp", "--dp", "4", "--pp", "1", "--depth", "4", "--micro-batches", "1", "--fwd-ms", "100"]),
    ("mpi4", ["--stack", "mpi", "--dp", "4", "--pp", "1", "--fwd-ms", "150"]),
]


def plan():
    """name -> (set, testbed arguments)."""
    p = {}
    for k, (name, shape) in enumerate(SHAPES):
        p[f"healthy_{name}"] = ("healthy", shape + ["--iters", "14"] + (LINE if k % 3 == 0 else []))
        p[f"healthy_{name}_load"] = ("healthy", shape + ["--iters", "14"] + LOAD)
    pauses = [("dp2pp2", 6, 1.5), ("dp4", 5, 2), ("dp2", 7, 1), ("pp4", 6, 2), ("dp2pp2_gpipe", 5, 3),
              ("dp3pp2", 8, 1.5), ("ddp4", 6, 2), ("mpi4", 6, 2), ("dp2pp2tp2", 7, 1), ("pp2", 5, 2.5)]
    shapes = dict(SHAPES)
    for k, (name, at, sec) in enumerate(pauses):
        p[f"pause_{name}"] = ("benign", shapes[name] + ["--iters", "14", "--fault", f"pause:at={at},seconds={sec}"]
                              + (LOAD if k % 3 == 1 else []))
    for name in ("dp2pp2", "dp4", "pp4"):
        p[f"eval_{name}"] = ("benign", shapes[name] + ["--iters", "14", "--fault", "eval:at=6,batches=8"])
    p["later_job"] = ("benign", ["--dp", "2", "--pp", "1", "--iters", "14", "--also",
                                 "dp=2,pp=1,iters=8,delay=3"])
    slow = [("dp4", "n2"), ("dp2pp2", "n2"), ("dp4", "n0"), ("dp2pp2", "n1"), ("dp3pp2", "n4")]
    for k in range(10):
        name, node = slow[k % len(slow)]
        p[f"slowlink_{name}_{node}_{k}"] = ("slowlink", shapes[name] + LINE + [
            "--iters", "16", "--fault", f"slowlink:node={node},rate=200mbit,from=6"] + (LOAD if k >= 5 else []))
    return p


def record(name, args, out):
    r = subprocess.run([PY, os.path.join(HERE, "testbed.py"), "run", "--out", out, "--force"] + args,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    shutil.rmtree(os.path.join(out, "pcap"), ignore_errors=True)  # flows.csv holds what the analysis reads
    if r.returncode:
        print(f"alarms: {name}: the testbed run failed ({r.returncode}):\n{r.stdout[-2000:]}", flush=True)
    return r.returncode == 0


def judge(run_dir, netprism):
    """(set, ok, text) of one recorded run."""
    manifest, truth = score.load_truth(run_dir)
    kind = plan().get(os.path.basename(run_dir), (None,))[0]
    doc = score.from_analyze(netprism, run_dir)
    findings = [f for j in doc.get("jobs", []) for f in j.get("findings", [])]
    slow = [f for f in manifest.get("faults", []) if f["kind"] == "slowlink"]
    if not slow:
        text = "; ".join(f"{f['kind']} {f['subject']} it {f['first_iteration']}: {f['evidence']}" for f in findings)
        benign = len(manifest["jobs"]) > 1 or any(f["kind"] != "cpuload" for f in manifest.get("faults", []))
        return kind or ("benign" if benign else "healthy"), not findings, f"{len(findings)} findings" + (f": {text}" if text else "")
    with open(os.devnull, "w") as null:
        res = score.score(manifest, truth, doc, out=null)
    rows = [r for j in res["jobs"] for r in j["findings"]]
    extra = [f for j in res["jobs"] for f in j["false_positives"] + j["explained"]]
    delay = [r["found_iteration"] - r["fault_iteration"] for r in rows
             if r["ok"] and r["found_iteration"] is not None and r["fault_iteration"] is not None]
    ok = bool(rows) and all(r["ok"] for r in rows) and bool(delay) and max(delay) <= 5
    text = (f"{'named' if ok else 'NOT named'}: {[r['found'] for r in rows]} delay {delay} iterations; "
            f"{len(extra)} other findings {[(f['kind'], f['subject']) for f in extra]}")
    return "slowlink", ok, text


def report(dirs, netprism):
    counts = {}
    for d in dirs:
        try:
            kind, ok, text = judge(d, netprism)
        except (OSError, ValueError, RuntimeError, KeyError) as e:
            kind, ok, text = "error", False, str(e)
        c = counts.setdefault(kind, [0, 0])
        c[0] += 1
        c[1] += ok
        print(f"alarms: {os.path.basename(d):<28} {kind:<9} {'ok ' if ok else 'BAD'} {text}", flush=True)
    h, b, s = (counts.get(k, [0, 0]) for k in ("healthy", "benign", "slowlink"))
    print(f"alarms: healthy runs without findings: {h[1]}/{h[0]}; benign runs without findings: {b[1]}/{b[0]}; "
          f"2x slow link named within 5 iterations: {s[1]}/{s[0]}; errors: {counts.get('error', [0])[0]}")
    good = h[1] == h[0] and b[1] == b[0] and s[1] >= 0.9 * s[0] and "error" not in counts
    return 0 if good else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["run", "record", "score", "list"])
    ap.add_argument("dirs", nargs="*")
    ap.add_argument("--netprism")
    ap.add_argument("--out", help="record: keep the runs here")
    ap.add_argument("--keep", help="run: keep the runs here (default: a temporary directory, removed)")
    ap.add_argument("--sets", default="healthy,benign,slowlink")
    ap.add_argument("--only", nargs="*", help="only these runs of the plan")
    a = ap.parse_args()
    p = {n: v for n, v in plan().items() if v[0] in a.sets.split(",") and (not a.only or n in a.only)}
    if a.cmd == "list":
        print("\n".join(f"{n} {s} {' '.join(x)}" for n, (s, x) in p.items()))
        return 0
    if a.cmd == "score":
        dirs = [os.path.join(d, n) if os.path.exists(os.path.join(d, n, "run.json")) else d
                for d in a.dirs for n in (sorted(os.listdir(d)) if not os.path.exists(os.path.join(d, "run.json"))
                                          else [""])]
        return report([d.rstrip("/") for d in dirs if os.path.exists(os.path.join(d, "run.json"))], a.netprism)
    if os.geteuid() != 0:
        print("alarms: needs root (namespaces, tc, tcpdump)", file=sys.stderr)
        return 1 if os.environ.get("CI") == "true" else 77
    base = a.out or a.keep or tempfile.mkdtemp(prefix="np-alarms-")
    try:
        done = [os.path.join(base, n) for n, (_, args) in p.items() if record(n, args, os.path.join(base, n))]
        if a.cmd == "record":
            return 0 if len(done) == len(p) else 1
        return report(done, a.netprism) or (0 if len(done) == len(p) else 1)
    finally:
        if a.cmd == "run" and not a.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
