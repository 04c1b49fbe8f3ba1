#!/usr/bin/env python3
"""Counters-only analysis of a recording (issue 16 item 4, offline): derive what a counters-only agent would
have shipped during a recorded testbed run (counters_derive.py: per-node port byte series sampled every 10 ms,
QP tables with PSNs, the rendezvous TCP connection), analyse it with `netprism analyze --format
rdma-counters`, and score the answer against the run's truth (score.py) with the given thresholds.

usage: counters_derived.py SAMPLE --netprism BIN [--replay REPLAY] [score.py options]

--replay REPLAY: analyse through the daemon's live path instead (tests/golden/golden_replay: the streaming
engine fed batch by batch, the counters source segment by segment as live_analysis.cpp runs it), scoring its
last pass' jobs.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import counters_derive  # noqa: E402
import score  # noqa: E402


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--netprism":
        print(__doc__, file=sys.stderr)
        return 2
    name, netprism, thresholds = sys.argv[1], sys.argv[3], sys.argv[4:]
    replay = None
    if thresholds[:1] == ["--replay"]:
        replay, thresholds = thresholds[1], thresholds[2:]
    sample = os.path.join(HERE, "samples", name)
    with tempfile.TemporaryDirectory(prefix=f"np-counters-{name}-") as tmp:
        src = os.path.join(tmp, "counters.json")
        doc = counters_derive.derive(sample, 10.0)
        with open(src, "w") as f:
            import json
            json.dump(doc, f)
        print(f"counters_derived {name}: {len(doc['rdma_bursts'])} port bursts, {len(doc['qps'])} QP rows, "
              f"{len(doc['flows'])} bootstrap flow rows")
        ans = os.path.join(tmp, "answer.json")
        with open(ans, "w") as out:
            argv = ([replay, src, "--format", "rdma-counters"] if replay else
                    [netprism, "analyze", "--input", src, "--format", "rdma-counters", "--json"])
            r = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True, timeout=300)
        if r.returncode != 0:
            print(f"netprism analyze failed ({r.returncode}): {r.stderr.strip()}", file=sys.stderr)
            return 1
        import json
        with open(ans) as f:
            jobs = json.load(f)["jobs"]
        bad = [j["id"] for j in jobs if j.get("source") != "counters"]
        if bad:
            print(f"FAIL: jobs not reported as source=counters: {bad}", file=sys.stderr)
            return 1
        return score.main([sample, "--json", ans] + thresholds)


if __name__ == "__main__":
    sys.exit(main())
