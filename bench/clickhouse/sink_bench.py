#!/usr/bin/env python3
"""Does ingest into ClickHouse keep up with one aggregator's local ingest? (issue 23; bench/README.md)

Three phases in one run, same machine, same load (netprism-sim's virtual agents over the real wire protocol,
offered faster than one aggregator can store, so the acked rate is the local ingest rate):
  1. baseline: an aggregator without --clickhouse: its local ingest rate L (records/s acked).
  2. live: the same with --clickhouse: local rate with the sink beside it, the most batches the sink was
     behind, and how long after the load's end ClickHouse had everything.
  3. backlog: that aggregator restarted against a fresh database with its high-water mark removed, so the
     sink copies the whole store as fast as it can: the sink's rate S (rows/s into ClickHouse).
Prints S / L: above 1, the sink outruns what one aggregator can ingest. On a shared machine the wall-clock
rates follow whatever else runs; the CPU each side spends per record (ingest: the aggregator's threads but the
live analysis; ClickHouse: the sink thread plus clickhouse-server) gives the capacity ratio independent of that.

usage: sink_bench.py NETPRISM NETPRISM_AGGREGATOR NETPRISM_SIM [--agents N] [--rate R] [--duration S]"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "clickhouse"))
from chserver import Servers  # noqa: E402
from daemons import Aggregator  # noqa: E402


def cpu_s(pid):
    """User + system CPU seconds of a process so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid, name):
    """CPU seconds of the process' threads called `name`."""
    total = 0.0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() != name:
                    continue
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def ingest_cpu_s(pid):
    """CPU seconds of the aggregator's ingest: every thread but the live analysis (np-analysis)."""
    return cpu_s(pid) - thread_cpu_s(pid, "np-analysis")


def load(sim, agg, a):
    """Runs the load; (records acked, seconds), the max pending batches seen."""
    p = subprocess.Popen([sim, "load", "--aggregator", agg.listen, "--agents", str(a.agents), "--rate",
                          str(a.rate), "--duration", str(a.duration)], stdout=subprocess.PIPE, text=True)
    pending = 0
    while p.poll() is None:
        st = agg.status() or {}
        pending = max(pending, st.get("clickhouse", {}).get("pending_batches", 0))
        time.sleep(0.5)
    out = p.stdout.read()
    line = [x for x in out.splitlines() if x.startswith("load:")][-1]
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    acked = int(fields["records_acked"])
    secs = acked / float(fields["acked_rate"].rstrip("/s"))
    return acked, secs, pending


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("aggregator")
    ap.add_argument("sim")
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--rate", type=int, default=40000, help="records/s per agent offered")
    ap.add_argument("--duration", type=int, default=15)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="np-ch-bench-")
    print("load average at start: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    aggs = []
    try:
        with Servers(1) as ch:
            base = Aggregator(a.aggregator, a.cli, tmp, "baseline")
            aggs.append(base)
            c0 = ingest_cpu_s(base.proc.pid)
            n0, s0, _ = load(a.sim, base, a)
            ingest_us = (ingest_cpu_s(base.proc.pid) - c0) * 1e6 / n0
            base.stop()
            L = n0 / s0
            print("baseline (no sink): %d records in %.1f s: L = %.0f records/s; ingest CPU %.2f us/record"
                  % (n0, s0, L, ingest_us))

            live = Aggregator(a.aggregator, a.cli, tmp, "live", ["--clickhouse", ch.url(0, "bench_live")])
            aggs.append(live)
            n1, s1, pending = load(a.sim, live, a)
            t_end = time.time()
            st = live.wait_sunk(timeout=600)
            lag = time.time() - t_end
            live.stop()
            print("live (sink on): %d records in %.1f s: %.0f records/s locally (%.2f of L); sink at most %d "
                  "batches behind; all in ClickHouse %.1f s after the load ended (%d rows)"
                  % (n1, s1, n1 / s1, n1 / s1 / L, pending, lag, st["clickhouse"]["sunk_rows"]))

            os.remove(os.path.join(live.data_dir, "clickhouse.hwm"))
            # The clock starts once the restarted aggregator answers: its start-up reload of the analysis
            # window (live.preload(), ~1 core for 10-20 s over this store) comes before the sink's thread.
            again = Aggregator(a.aggregator, a.cli, tmp, "live", ["--clickhouse", ch.url(0, "bench_backlog")])
            aggs.append(again)
            t0, ch0 = time.time(), cpu_s(ch.procs[0].pid)
            rows0 = (again.status() or {}).get("clickhouse", {}).get("sunk_rows", 0)
            st = again.wait_sunk(timeout=900)
            secs = time.time() - t0
            sink_cpu, ch_cpu = thread_cpu_s(again.proc.pid, "np-clickhouse"), cpu_s(ch.procs[0].pid) - ch0
            rows = st["clickhouse"]["sunk_rows"] - rows0
            S = rows / secs
            print("backlog: %d rows from the store into ClickHouse in %.1f s: S = %.0f rows/s; CPU: sink thread %.1f s "
                  "(%.2f us/row), clickhouse-server %.1f s (%.2f us/row)"
                  % (rows, secs, S, sink_cpu, sink_cpu * 1e6 / rows, ch_cpu, ch_cpu * 1e6 / rows))
            events = dict(line.split("\t") for line in ch.query(
                0, "SELECT event, toString(value) FROM system.events WHERE event LIKE 'MergeTreeDataWriterBlocks%' "
                "FORMAT TabSeparated").splitlines())
            print("clickhouse-server: %s of %s inserted blocks arrived sorted (no server-side sort)"
                  % (events.get("MergeTreeDataWriterBlocksAlreadySorted", "0"),
                     events.get("MergeTreeDataWriterBlocks", "0")))
            print("S / L = %.2f (ClickHouse ingest / one aggregator's local ingest, wall clock)" % (S / L))
            sink_us = (sink_cpu + ch_cpu) * 1e6 / rows
            print("by CPU: local ingest %.2f us/record, into ClickHouse %.2f us/row (sink + server): "
                  "capacity ratio %.2f" % (ingest_us, sink_us, ingest_us / sink_us))
            print("load average at end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    finally:
        for g in aggs:
            g.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
