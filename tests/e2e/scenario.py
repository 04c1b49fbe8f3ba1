#!/usr/bin/python3
"""One end-to-end scenario: a fresh testbed run, then netprism on its recording, scored against the truth.

  scenario.py NAME --netprism PATH [--keep DIR] [--mode analyze|live] [--agent PATH --aggregator PATH]

analyze (default): `netprism analyze --format csv --topology ... --json` on the run's tcpdump capture.
live: a netprism-agent per namespace and a netprism-aggregator on the host watch the run; the scorer reads
`netprism jobs/job/timeline/diagnose --json` (and, for a hang, when the job's state turned `hung`).
The scenario table below is what CTest registers (tests/e2e/CMakeLists.txt); `scenario.py --list` prints it.
Acceptance thresholds are those of issues 7 and 8: exact jobs/parallelism/state, no missing or extra
iterations after the first two, duration error median <= 0.3 % and p95 <= 1 % (or within 1.5 x the run's own
truth noise), the injected fault named (within 3 iterations), no false positives.
Exit 0 pass, 1 fail, 77 skipped (not root outside CI).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import score  # noqa: E402

PY = "/usr/bin/python3"

# name -> testbed run arguments. Sized for 2 cores: <= 8 ranks, ~0.3-0.5 s steps, 12-14 iterations.
SCENARIOS = {
    "dp4_1f1b": ["--dp", "4", "--pp", "1", "--iters", "12"],
    "pp4_1f1b": ["--dp", "1", "--pp", "4", "--iters", "12"],
    "pp4_gpipe": ["--dp", "1", "--pp", "4", "--schedule", "gpipe", "--iters", "12"],
    # Two stages in 1F1B: one activation in flight after the warm-up, so the last gradient of a micro-batch
    # and the next activation cross (the first stage's outstanding volume touches zero mid-iteration).
    "pp2_1f1b": ["--dp", "1", "--pp", "2", "--micro-batches", "6", "--fwd-ms", "20", "--iters", "14"],
    "dp2pp2_1f1b": ["--dp", "2", "--pp", "2", "--iters", "12"],
    "dp2pp2_gpipe": ["--dp", "2", "--pp", "2", "--schedule", "gpipe", "--iters", "12"],
    "dp2pp2tp2_1f1b": ["--dp", "2", "--pp", "2", "--tp", "2", "--iters", "12"],
    # TP larger than a server (issue 17): every rank on a node of its own, so the TP group's all-reduces (every
    # block, every micro-batch, forward and backward) cross the network beside the DP all-reduce.
    "dp2tp2_nodes": ["--dp", "2", "--pp", "1", "--tp", "2", "--tp-nodes", "--iters", "12"],
    "dp2pp2tp2_nodes": ["--dp", "2", "--pp", "2", "--tp", "2", "--tp-nodes", "--iters", "12"],
    "two_jobs": ["--dp", "2", "--pp", "1", "--iters", "14", "--also", "dp=1,pp=2,schedule=gpipe,fwd_ms=15,delay=1.5"],
    "straggler": ["--dp", "2", "--pp", "2", "--iters", "14", "--fault", "straggler:node=n1,factor=1.5,from=7"],
    "straggler_dp4": ["--dp", "4", "--pp", "1", "--iters", "12", "--fault", "straggler:node=n2,factor=1.35,from=5"],
    "slowlink": ["--dp", "2", "--pp", "2", "--iters", "14", "--fault", "slowlink:node=n2,rate=30mbit,from=7"],
    "hang": ["--dp", "2", "--pp", "2", "--iters", "14", "--fault", "hang:node=n3,at=8,hold=5"],
    "pause": ["--dp", "2", "--pp", "2", "--iters", "12", "--fault", "pause:at=6,seconds=1.5"],
    # The demo's shape (scripts/demo) on a loaded host: its sample was recorded with 5 CPU burners (`yes`)
    # running beside the 4 ranks on the 2 cores (load average ~6), the condition under which stage inference
    # once failed. A fresh run of this entry has no burners unless the host is busy already.
    "straggler_loaded": ["--dp", "2", "--pp", "2", "--iters", "24", "--fault", "straggler:node=n2,factor=1.3,from=12"],
    # The second real training stack (issue 17): OpenMPI ranks launched by mpirun across the namespaces
    # (train_mpi.py), data-parallel over 4 nodes. Horovod-style: 4 gradient buckets all-reduced by a background
    # thread while the backward pass still runs (each bucket looks like a synchronisation of its own); ZeRO-style:
    # bucketed reduce-scatter during the backward pass, then all-gather of the updated shards (a pattern gloo
    # does not make). OpenMPI picks its own algorithms (recursive doubling / ring by size).
    "mpi_dp4_allreduce": ["--stack", "mpi", "--dp", "4", "--pp", "1", "--iters", "14", "--fwd-ms", "150"],
    "mpi_dp4_zero": ["--stack", "mpi", "--pattern", "zero", "--dp", "4", "--pp", "1", "--iters", "14", "--fwd-ms",
                     "150"],
    # FSDP / ZeRO-3 on OpenMPI: every unit's parameters all-gathered before its forward and again before its
    # backward, its gradient reduce-scattered after it: DP traffic all through the iteration, no quiet forward
    # pass (the timeline reads the period of its quiets in DP volume, iteration_period.cpp).
    "mpi_dp4_zero3": ["--stack", "mpi", "--pattern", "zero3", "--dp", "4", "--pp", "1", "--iters", "14",
                      "--fwd-ms", "150"],
    # The same over two ranks: OpenMPI's two-rank reduce-scatter is a reduce and a smaller scatter back (1.33x
    # one way), a request-response shape that once read as a two-stage pipeline (edge_drift.cpp), and no quiet
    # closes the iterations (the optimizer's is shorter than a backward unit's: iteration_volume.cpp).
    "mpi_dp2_zero3": ["--stack", "mpi", "--pattern", "zero3", "--dp", "2", "--pp", "1", "--iters", "14",
                      "--fwd-ms", "150"],
    # PyTorch DDP on gloo: one gradient bucket per block, all-reduced while the backward pass still runs.
    "ddp_dp4": ["--ddp", "--dp", "4", "--pp", "1", "--depth", "4", "--micro-batches", "1", "--iters", "14",
                "--fwd-ms", "100"],
    # DDP over two nodes with a straggler: one edge, so its role rests on causality alone; DDP's start-up
    # broadcast of rank 0's parameters (one-way, never answered) once made it read as a pipeline.
    "ddp2_straggler": ["--ddp", "--dp", "2", "--pp", "1", "--depth", "4", "--micro-batches", "1", "--iters", "14",
                       "--fwd-ms", "100", "--fault", "straggler:node=n1,factor=1.4,from=6"],
    "mpi_straggler": ["--stack", "mpi", "--dp", "4", "--pp", "1", "--iters", "14", "--fwd-ms", "150", "--fault",
                      "straggler:node=n1,factor=1.4,from=6"],
    # Two replicas with a straggler: the fast rank waits for each of its buckets, so quiets grow inside the
    # iteration (a reading of one and two iterations at once once held: iteration_volume.cpp).
    "mpi_dp2_straggler": ["--stack", "mpi", "--dp", "2", "--pp", "1", "--iters", "14", "--fwd-ms", "150", "--fault",
                          "straggler:node=n1,factor=1.4,from=6"],
    # Issue 22's alarms (tests/e2e/alarms.py runs the whole campaign): healthy shapes under host CPU load (3
    # burners), a checkpoint-like pause under load, and a 2x degraded host link (every link shaped to a line rate,
    # the node's at half of it) where the only comparable links are one other pair, and in a DP4 ring.
    "pp4_loaded": ["--dp", "1", "--pp", "4", "--iters", "14", "--fault", "cpuload:workers=3"],
    "dp3pp2_loaded": ["--dp", "3", "--pp", "2", "--fwd-ms", "40", "--iters", "14", "--fault", "cpuload:workers=3"],
    # DDP4 beside 3 CPU burners: a replica's first bucket late by chance in 5 iterations in a row (one of four
    # replicas: the straggler's sign window grows with the group, diagnosis_straggler.cpp).
    "ddp4_loaded": ["--ddp", "--dp", "4", "--pp", "1", "--depth", "4", "--micro-batches", "1", "--fwd-ms", "100",
                    "--iters", "14", "--fault", "cpuload:workers=3"],
    "pause_dp4": ["--dp", "4", "--pp", "1", "--iters", "14", "--fault", "pause:at=5,seconds=2", "--fault",
                  "cpuload:workers=3"],
    # OpenMPI DP4 beside 3 CPU burners on unshaped veths (the alarms campaign's healthy_mpi4_load and pause_mpi4
    # of 2026-11-28): a rank starved of CPU for several iterations ran one direction or all of its node's at
    # 0.22-0.51 of the others, a false slow_link until the comparison noise (diagnosis_link.cpp).
    "mpi_dp4_loaded": ["--stack", "mpi", "--dp", "4", "--pp", "1", "--fwd-ms", "150", "--iters", "14", "--fault",
                       "cpuload:workers=3"],
    "pause_mpi4_loaded": ["--stack", "mpi", "--dp", "4", "--pp", "1", "--fwd-ms", "150", "--iters", "14", "--fault",
                          "pause:at=6,seconds=2", "--fault", "cpuload:workers=3"],
    "slowlink_2x": ["--dp", "2", "--pp", "2", "--link-rate", "400mbit", "--iters", "16", "--fault",
                    "slowlink:node=n1,rate=200mbit,from=6"],
    "slowlink_2x_dp4": ["--dp", "4", "--pp", "1", "--link-rate", "400mbit", "--iters", "16", "--fault",
                        "slowlink:node=n2,rate=200mbit,from=6"],
}

# Live mode costs more CPU (an agent per node, the aggregator, CLI polling): the shapes and every fault.
# The 2x host links (issue 22) live too, in the campaign: 9 of 10 named within 5 iterations on 2026-11-27, but the
# DP4 ring's only 7 of 11 on 2026-11-29 (docs/analysis.md, "Slow host link": at the identifiability limit on
# veths, open); the strict timeline bounds failed 2 of those 10 at host load 10-12 (median error 1.5-1.8 %).
LIVE = ["dp2pp2tp2_1f1b", "two_jobs", "straggler", "slowlink", "hang", "pause", "mpi_dp4_allreduce", "mpi_straggler",
        "slowlink_2x", "slowlink_2x_dp4"]

# Which CTest suite runs each scenario, per mode: "default" (every `ctest` / scripts/test run) or "campaign"
# (on demand, `ctest -L campaign`: the fresh-run accuracy campaign whose strict scores go in the closing
# notes). Fresh runs of every shape are the campaign; the default suite covers the same analysis through the
# committed recordings (samples, ~1 s each) and a representative set of live runs (one healthy shape and each
# fault kind) inside its time budget. A scenario with an open accuracy gap moves its entry to "campaign",
# with the reason beside it, so that the default suite stays a green/red signal. Live slowlink is there: 4 of
# 4 fresh runs passed here after the data-timed bursts, then a CI run had 2 missing and 2 extra iterations
# (iterations 8-9, just after the fault's onset). Cause, found later: a retransmission stall (the shaper's
# drops) inside the slow stage's all-reduce split it into two complete-looking synchronisations, and pairing
# by order then put that stage's later ones an iteration early (4 of 22 recordings of both modes); fixed in
# the timeline (merge_stalled), after which 8 of 8 live runs passed here (4 beside a concurrent run, 3 beside two CPU burners). Analyze
# slowlink keeps a gap: its capture holds senders only, so the shaped member's arrivals are timed at its
# peer's send (0-60 ms early, behind the 50 ms tbf queue) and the median duration error exceeds 0.3 % in
# about half the runs (all iterations matched).
SUITE = {name: {"analyze": "campaign", "sample": "default",
                "live": "default" if name in ("dp2pp2tp2_1f1b", "straggler", "hang", "pause") else "campaign"}
         for name in SCENARIOS}


def ctest_labels(name, mode):
    """CTest labels of one scenario test: e2e, the part it scores (analysis; diagnosis when a fault is
    injected), the mode's own label (samples / live) and campaign when SUITE says so."""
    labels = ["e2e"]
    if mode != "live":
        labels.append("analysis")
        if "--fault" in SCENARIOS[name] and mode == "analyze":
            labels.append("diagnosis")
    labels.append({"analyze": None, "sample": "samples", "live": "live"}[mode])
    if SUITE[name][mode] == "campaign":
        labels.append("campaign")
    return ";".join(x for x in labels if x)


# The default suite's live runs share CI's 2 cores with the whole job (4-8 ranks), 4+ agents and the aggregator.
# A boundary is when the probe sees a rank's last DP sync; a rank descheduled for a scheduler slice or two
# (~3-6 ms each with ~10 runnable threads on 2 cores) moves one boundary by that much, and with ~10 matched
# iterations p95 is their largest error or the next: CI's e2e_live_pause read 11/11 iterations, median
# 0.18 %, but one boundary 6.2 ms off on a 478 ms step (p95 1.30 % > 1 %). So those runs check structure,
# count and findings exactly and accuracy within 1 % median and 3 % p95 (~15 ms at ~0.5 s steps: two to
# five slices); the strict bounds below are the campaign copies' (e2e_live_NAME_strict) and the scorer's.
CI_MARGINS = ("1.0", "3.0")  # median, p95 (%)
STRICT = ("0.3", "1.0")


def thresholds(netprism, ci_margins=False):
    """The acceptance thresholds of issues 7 and 8 (or CI's accuracy margins), as scorer options."""
    median, p95 = CI_MARGINS if ci_margins else STRICT
    args = ["--strict", "--max-median-err", median, "--max-p95-err", p95, "--noise-factor", "1.5", "--grace", "2",
            "--max-missing", "0", "--max-extra", "0", "--max-finding-delay", "3"]
    return args + (["--netprism", netprism] if netprism else [])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", nargs="?")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--list-live", action="store_true")
    ap.add_argument("--list-ctest", action="store_true",
                    help="one line per test for CMake: MODE NAME LABELS (LABELS ;-separated); sample tests only for "
                         "scenarios with a committed recording")
    ap.add_argument("--netprism", help="netprism CLI binary")
    ap.add_argument("--agent", help="live: netprism-agent binary")
    ap.add_argument("--aggregator", help="live: netprism-aggregator binary")
    ap.add_argument("--ci-margins", action="store_true",
                    help="live: accuracy within CI's margins (median 1 %%, p95 3 %%) instead of the strict bounds")
    ap.add_argument("--keep", help="keep the run directory here (default: a temporary one, removed)")
    ap.add_argument("--mode", choices=["analyze", "live", "sample"], default="analyze",
                    help="analyze: a fresh run, netprism analyze on its capture; live: a fresh run watched by "
                         "agents + aggregator, CLI queries; sample: netprism analyze on the committed recording")
    a = ap.parse_args()
    if a.list_ctest:
        for mode in ("analyze", "sample", "live"):
            for name in LIVE if mode == "live" else SCENARIOS:
                if mode == "sample" and not os.path.exists(os.path.join(HERE, "samples", name, "flows.csv.gz")):
                    continue
                print(mode, name, ctest_labels(name, mode))
                if mode == "live" and SUITE[name]["live"] == "default":  # its strict copy, on demand
                    print("live_strict", name, ctest_labels(name, mode) + ";campaign")
        return 0
    if a.list or a.list_live:
        print("\n".join(LIVE if a.list_live else SCENARIOS))
        return 0
    if a.name not in SCENARIOS:
        ap.error(f"unknown scenario {a.name!r}; known: {', '.join(SCENARIOS)}")
    if a.mode == "sample":  # the committed recording: no root, no namespaces, seconds
        sample = os.path.join(HERE, "samples", a.name)
        # A recording with a stated limit keeps its own thresholds (score_args; tests/e2e/samples/README.md).
        if os.path.exists(os.path.join(sample, "score_args")):
            with open(os.path.join(sample, "score_args")) as f:
                return score.main([sample] + f.read().split() + (["--netprism", a.netprism] if a.netprism else []))
        return score.main([sample] + thresholds(a.netprism))
    if os.geteuid() != 0:
        print("scenario: needs root (namespaces, tc, tcpdump)", file=sys.stderr)
        return 1 if os.environ.get("CI") == "true" else 77
    tmp = None
    if a.keep:
        out = a.keep
    else:
        tmp = tempfile.mkdtemp(prefix=f"np-{a.name}-")
        out = os.path.join(tmp, "run")
    try:
        extra = []
        if a.mode == "live":
            extra = ["--live"] + (["--netprism", a.netprism] if a.netprism else [])
            extra += ["--agent", a.agent] if a.agent else []
            extra += ["--aggregator-bin", a.aggregator] if a.aggregator else []
        r = subprocess.run([PY, os.path.join(HERE, "testbed.py"), "run", "--out", out, "--force"]
                           + SCENARIOS[a.name] + extra)
        if r.returncode:
            print(f"scenario {a.name}: the testbed run failed ({r.returncode})")
            return 1
        if a.mode == "live":
            return score.main([out, "--json", os.path.join(out, "live.json")] + thresholds(None, a.ci_margins))
        return score.main([out] + thresholds(a.netprism))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
