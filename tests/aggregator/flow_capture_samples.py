#!/usr/bin/python3
"""`netprism analyze --format ipfix|sflow` on real exporters' captures (tests/data/flow_export, from one
testbed run of a DP 2 x PP 2 job): every capture decodes without errors and gives one job of the run's four
nodes with its exact parallelism (the IPFIX captures through their coarse pipeline records, issue 22) and its
step; hostile variants (a capture cut mid-packet, the wrong format, not a capture) get a clear error or a
warning, never a crash. No root needed.

usage: flow_capture_samples.py NETPRISM NP_FLOWDUMP DATA_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

CAPTURES = {"softflowd_ipfix.pcap": "ipfix", "pmacct_nfprobe_ipfix.pcap": "ipfix",
            "pmacct_sfprobe_sflow.pcap": "sflow"}
# The run's truth (tests/e2e/train.py: node = stage * dp + dp_rank): stage 0 is n0 and n1, which are one DP
# group, as are n2 and n3. Its step was 4.52 s (tests/data/flow_export/README.md); the timeline reads it from
# the DP exchanges, which every exporter shows within about its time resolution: 3 % of the step (135 ms).
TRUTH = {"dp": 2, "pp": 2, "dp_groups": [["n0", "n1"], ["n2", "n3"]], "stages": [["n0", "n1"], ["n2", "n3"]]}
STEP_MS, STEP_TOLERANCE = 4520, 0.03
# The IPFIX exporters' pipeline records last up to their 1 s timeouts (coarse: roles from volume, order from
# the synchronisations); sFlow's packet samples lie anywhere in pmacct's 1 s flush interval, so every edge is
# coarse and the step is an estimate at that resolution (flowin/sflow.cpp).
COARSE_EDGES = {"ipfix": 2, "sflow": 4}
ESTIMATED = {"ipfix": None, "sflow": (900, 1100)}  # time_resolution_ms when the step is an estimate


def check_job(name, fmt, job):
    par = job["parallelism"]
    got = {k: par.get(k) for k in TRUTH}
    step = job.get("step_time_ms", 0)
    print(f"{name}: parallelism {got}, coarse edges {par.get('coarse_edges', 0)}, step {step:.1f} ms, "
          f"{len(job.get('iterations', []))} iterations")
    bad = []
    if got != TRUTH:
        bad.append(f"{name}: parallelism {got}, expected {TRUTH}")
    if par.get("coarse_edges", 0) != COARSE_EDGES[fmt]:
        bad.append(f"{name}: {par.get('coarse_edges', 0)} coarse edges, expected {COARSE_EDGES[fmt]}")
    if abs(step - STEP_MS) > STEP_TOLERANCE * STEP_MS:
        bad.append(f"{name}: step {step:.1f} ms, expected {STEP_MS} ms within {100 * STEP_TOLERANCE:.0f} %")
    # IPFIX: the DP exchanges come in fine records, so the step is measured, not estimated. sFlow: an estimate
    # at the flush interval's resolution, and said so.
    res = job.get("time_resolution_ms") if job.get("step_time_estimated") else None
    want = ESTIMATED[fmt]
    if (res is None) != (want is None) or (want and not want[0] <= res <= want[1]):
        bad.append(f"{name}: step estimated at resolution {res} ms, expected {want}")
    return bad


def main():
    netprism, flowdump, data = sys.argv[1:4]
    topo = os.path.join(data, "topology.txt")
    fails = []

    def analyze(path, fmt):
        return subprocess.run([netprism, "analyze", "--input", path, "--format", fmt, "--topology", topo, "--json"],
                              capture_output=True, text=True, timeout=60)

    for name, fmt in CAPTURES.items():
        path = os.path.join(data, name)
        r = analyze(path, fmt)
        if r.returncode != 0:
            fails.append(f"{name}: analyze exited {r.returncode}: {r.stderr.strip()}")
            continue
        out = json.loads(r.stdout)["jobs"]
        jobs = [sorted(j["nodes"]) for j in out]
        print(f"{name}: jobs {jobs}")
        if jobs != [["n0", "n1", "n2", "n3"]]:
            fails.append(f"{name}: jobs {jobs}, expected one job of n0..n3")
        else:
            fails += check_job(name, fmt, out[0])
        d = subprocess.run([flowdump, path, fmt], capture_output=True, text=True, timeout=60)
        stats = dict(kv.split("=") for kv in d.stdout.strip().splitlines()[-1].split()[2:])
        print(f"{name}: {stats}")
        if int(stats["errors"]) or int(stats["no_template"]) or not int(stats["records"]):
            fails.append(f"{name}: decoder stats {stats}")

    tmp = tempfile.mkdtemp(prefix="np-flowcap-")
    try:
        # Cut mid-packet: what was read is analysed, with libpcap's reason as a warning.
        src = os.path.join(data, "pmacct_sfprobe_sflow.pcap")
        cut = os.path.join(tmp, "cut.pcap")
        with open(src, "rb") as f, open(cut, "wb") as g:
            g.write(f.read()[: os.path.getsize(src) // 2 + 7])
        r = analyze(cut, "sflow")
        print(f"cut capture: exit {r.returncode}: {r.stderr.strip()[:200]}")
        if r.returncode != 0 or "truncated" not in r.stderr or len(json.loads(r.stdout)["jobs"]) != 1:
            fails.append(f"cut capture: exit {r.returncode}: {r.stderr.strip()} {r.stdout[:200]}")
        # The wrong format: not one datagram decodes, a clear error.
        r = analyze(src, "ipfix")
        if r.returncode != 1 or "none of them ipfix" not in r.stderr:
            fails.append(f"sFlow read as IPFIX: exit {r.returncode}: {r.stderr.strip()}")
        # Not a capture at all.
        r = analyze(topo, "ipfix")
        if r.returncode != 1 or "not a pcap" not in r.stderr:
            fails.append(f"text file as capture: exit {r.returncode}: {r.stderr.strip()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
