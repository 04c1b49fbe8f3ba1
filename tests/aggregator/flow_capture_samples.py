#!/usr/bin/python3
"""`netprism analyze --format ipfix|sflow` on real exporters' captures (tests/data/flow_export, from one
testbed run of a DP 2 x PP 2 job): every capture decodes without errors and gives one job of the run's four
nodes; hostile variants (a capture cut mid-packet, the wrong format, not a capture) get a clear error or a
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
        jobs = [sorted(j["nodes"]) for j in json.loads(r.stdout)["jobs"]]
        print(f"{name}: jobs {jobs}")
        if jobs != [["n0", "n1", "n2", "n3"]]:
            fails.append(f"{name}: jobs {jobs}, expected one job of n0..n3")
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
