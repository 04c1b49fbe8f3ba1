#!/usr/bin/env python3
"""Issue 23: the analysis role. `netprism-aggregator --analyze-from-clickhouse URL [--shard K/N]` follows the
flowlets every aggregator inserts into ClickHouse and serves jobs/timeline over them.

Two clickhouse-servers form a two-shard cluster; two aggregators write to a Distributed table over it (the
two_aggregators fixture). Three analysers run while a recorded sample (tests/e2e/samples, shifted so that it
ends now: a live analysis judges times by its clock) is replayed as agents, its nodes split so that every job
spans both aggregators: one unsharded (through server 0) and shards 0/2 and 1/2 (through server 1). Each
must converge to the offline analysis of the same data: `netprism analyze --clickhouse` of the database
(exact: same node groups, iteration starts, ends and durations) and `netprism analyze --input` of the
sample itself (same groups, iteration count and durations to 1 us: the shift moves times, and the
timeline computes in doubles). The
shards' jobs are disjoint and together the unsharded ones.

usage: analyzer_test.py NETPRISM NETPRISM_AGGREGATOR NP_REPLAY SAMPLES_DIR"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chserver import Servers, free_port  # noqa: E402
from daemons import Aggregator  # noqa: E402

CLI, AGG, REPLAY, SAMPLES = sys.argv[1:5]
CASES = {"dp2pp2_1f1b": {"n0": 0, "n1": 0, "n2": 1, "n3": 1},
         "two_jobs": {"n0": 0, "n1": 1, "n2": 0, "n3": 1}}
CONVERGE_S = 40


def run_json(*args, may_fail=False):
    r = subprocess.run([CLI] + list(args), capture_output=True, text=True, timeout=120)
    if may_fail and r.returncode != 0:
        return None  # a query timing out on a loaded machine: the caller asks again
    assert r.returncode == 0, (args, r.stderr)
    return json.loads(r.stdout)


def analyzer_status(a):
    """The analyser's clickhouse_analyzer counters, asking again while a status query times out."""
    deadline = time.time() + 30
    while time.time() < deadline:
        st = a.status(timeout=5)
        if st is not None:
            return st["clickhouse_analyzer"]
        time.sleep(0.3)
    raise AssertionError("no status from the analyser: %s" % open(a.log).read()[-1500:])


def offline(doc):
    """{sorted nodes: [(start_ns, end_ns, duration_ns)]} of an analyze document."""
    return {tuple(sorted(j["nodes"])): [(i["start_ns"], i["end_ns"], i["duration_ns"]) for i in j["iterations"]]
            for j in doc["jobs"]}


def live(a):
    """The same from an analyser's jobs and timelines; None while it does not answer."""
    q = ["--insecure", "--aggregator", a.query, "--timeout", "5"]
    jobs = run_json(*q, "jobs", "--json", may_fail=True)
    if jobs is None:
        return None
    out = {}
    for j in jobs["jobs"]:
        tl = run_json(*q, "timeline", j["id"], "--json", may_fail=True)
        if tl is None or len(tl["iterations"]) != j["iterations"]:  # a pass between the two queries
            return None
        out[tuple(sorted(j["nodes"]))] = [(i["start_ns"], i["end_ns"], i["duration_ns"])
                                          for i in tl["iterations"]]
    return out


def wait_equal(a, want, name):
    deadline, got = time.time() + CONVERGE_S, None
    while time.time() < deadline:
        got = live(a)
        if got == want:
            return got
        time.sleep(0.5)
    raise AssertionError("%s did not converge to the offline analysis:\n%s\n!=\n%s\nstatus %s\n%s" % (
        name, got, want, json.dumps(analyzer_status(a)), open(a.log).read()[-1500:]))


def wait_tables(ch, db, servers=(0, 1)):
    deadline = time.time() + 30
    while time.time() < deadline:
        if all(ch.query(i, "EXISTS TABLE %s.flowlets" % db).strip() == "1" for i in servers):
            return
        time.sleep(0.2)
    raise AssertionError("the aggregators did not create %s.flowlets" % db)


def sink_args(ch, db, i):
    return ["--clickhouse", ch.url(i, database=db, cluster=True)]


def check(ch, tmp, sample, split, late):
    db = "np_an_" + sample
    procs = []
    try:
        # late: aggregator 1 stores its share without ClickHouse first and is restarted with it once the
        # analysers have read aggregator 0's: its rows then arrive after rows with later first_ns (as after an
        # outage or a slow sink), which a watermark on first_ns would skip.
        # (It runs with ClickHouse once first: the tables must exist on both shards.)
        aggs = [Aggregator(AGG, CLI, tmp, "%s_a%d" % (sample, i), sink_args(ch, db, i)) for i in range(2)]
        procs += aggs
        wait_tables(ch, db)
        if late:
            aggs[1].stop()
            aggs[1] = Aggregator(AGG, CLI, tmp, "%s_a1" % sample)
            procs.append(aggs[1])
        fast = ["--analysis-interval-ms", "250"]
        http = "127.0.0.1:%d" % free_port()
        whole = Aggregator(AGG, CLI, tmp, sample + "_whole",
                           ["--analyze-from-clickhouse", ch.url(0, database=db, cluster=True), "--http", http]
                           + fast)
        procs.append(whole)
        shards = [Aggregator(AGG, CLI, tmp, "%s_shard%d" % (sample, k),
                             ["--analyze-from-clickhouse", ch.url(1, database=db, cluster=True),
                              "--shard", "%d/2" % k] + fast) for k in range(2)]
        procs += shards
        csv = os.path.join(tmp, sample + ".csv")
        with gzip.open(os.path.join(SAMPLES, sample, "flows.csv.gz")) as src, open(csv, "wb") as dst:
            shutil.copyfileobj(src, dst)
        topo = os.path.join(SAMPLES, sample, "topology.txt")
        args = [REPLAY, "--csv", csv, "--topology", topo, "--shift-to-now"]
        for node, a in split.items():
            args += ["--route", "%s=%s" % (node, aggs[a].listen)]
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        if late:
            sunk = aggs[0].wait_sunk()["clickhouse"]["sunk_rows"]
            deadline = time.time() + CONVERGE_S
            while analyzer_status(whole)["rows"] < sunk and time.time() < deadline:
                time.sleep(0.3)
            assert analyzer_status(whole)["rows"] == sunk, (analyzer_status(whole), sunk)
            aggs[1].stop()
            aggs[1] = Aggregator(AGG, CLI, tmp, "%s_a1" % sample, sink_args(ch, db, 1))
            procs.append(aggs[1])
        for a in aggs:
            a.wait_sunk()
        want = offline(run_json("analyze", "--json", "--clickhouse", ch.url(0, database=db, cluster=True)))
        assert want, "no job offline: %s" % sample
        # The recorded sample itself: same groups, iteration count and durations -- to 1 us: the timeline
        # computes in doubles, whose step at 1.8e18 ns is 256 ns, so the shift changes the last bits.
        orig = offline(run_json("analyze", "--json", "--input", csv, "--topology", topo))
        assert set(want) == set(orig), (list(want), list(orig))
        for g in want:
            assert len(want[g]) == len(orig[g]), (g, len(want[g]), len(orig[g]))
            assert all(abs(a[2] - b[2]) <= 1000 for a, b in zip(want[g], orig[g])), (g, want[g], orig[g])
        wait_equal(whole, want, sample + " unsharded analyser")
        parts = [wait_equal(s, {g: it for g, it in want.items() if g in mine}, "%s shard %d/2" % (sample, k))
                 for k, (s, mine) in enumerate(zip(shards, shard_groups(shards, want)))]
        assert sum(len(p) for p in parts) == len(want), parts
        st = analyzer_status(whole)
        assert st["rows"] == r_records(r) and st["errors"] == 0, (st, r_records(r))
        metrics = urllib.request.urlopen("http://%s/metrics" % http, timeout=10).read().decode()
        assert "netprism_clickhouse_analyzer_rows_total %d" % st["rows"] in metrics, metrics[-2000:]
        print("%s: %d job(s) %s; analysers equal offline; shards %s; rows %d read %d" % (
            sample, len(want), [(len(g), len(it)) for g, it in want.items()],
            [len(p) for p in parts], st["rows"], st["rows_read"]))
    finally:
        for p in procs:
            p.stop()


def r_records(r):
    return json.loads(r.stdout)["records"]


def shard_groups(shards, want):
    """Which of want's groups each shard analyser took: by its nodes (status: nodes of its jobs)."""
    deadline = time.time() + CONVERGE_S
    while time.time() < deadline:
        got = [live(s) for s in shards]
        if None in got:
            time.sleep(0.5)
            continue
        got = [set(g) for g in got]
        if set().union(*got) == set(want) and not (got[0] & got[1]):
            return got
        time.sleep(0.5)
    raise AssertionError("shards' jobs %s are not a split of %s; %s" % (
        got, list(want), [(analyzer_status(s), open(s.log).read()[-1500:]) for s in shards]))


def main():
    tmp = tempfile.mkdtemp(prefix="np-ch-an-")
    try:
        with Servers(2) as ch:
            for n, (sample, split) in enumerate(CASES.items()):
                check(ch, tmp, sample, split, late=n == 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
