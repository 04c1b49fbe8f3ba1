#!/usr/bin/env python3
"""Issue 23 acceptance: a training job whose nodes report to two different aggregators is one job with exact
groups and timeline, computed from ClickHouse.

Two clickhouse-servers form a two-shard cluster; two aggregators each write to a Distributed table over it
(one through each server). A recorded testbed sample (tests/e2e/samples) is replayed as agents by np_replay,
its nodes split across the aggregators so that every job spans both. `netprism analyze --clickhouse` (through
either server) must give exactly the document `netprism analyze --input` gives for the sample itself: same
jobs, groups, parallelism, iterations and timeline. Also: rows on both shards, nothing lost or doubled,
--since/--until windows, and --shard K/N (analysis sharded by job: the shards' jobs together are the whole).

usage: two_aggregators_test.py NETPRISM NETPRISM_AGGREGATOR NP_REPLAY SAMPLES_DIR"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chserver import Servers  # noqa: E402
from daemons import Aggregator  # noqa: E402

CLI, AGG, REPLAY, SAMPLES = sys.argv[1:5]
# sample -> which aggregator (0/1) each node reports to: every job gets nodes on both.
CASES = {"dp2pp2_1f1b": {"n0": 0, "n1": 0, "n2": 1, "n3": 1},
         "two_jobs": {"n0": 0, "n1": 1, "n2": 0, "n3": 1}}


def analyze(*args):
    r = subprocess.run([CLI, "analyze", "--json"] + list(args), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def check(ch, tmp, sample, split):
    db = "np_" + sample
    aggs = []
    try:
        for i in range(2):
            url = ch.url(i, database=db, cluster=True)
            aggs.append(Aggregator(AGG, CLI, tmp, "%s_a%d" % (sample, i), ["--clickhouse", url]))
        csv = os.path.join(tmp, sample + ".csv")
        with gzip.open(os.path.join(SAMPLES, sample, "flows.csv.gz")) as src, open(csv, "wb") as dst:
            shutil.copyfileobj(src, dst)
        topo = os.path.join(SAMPLES, sample, "topology.txt")
        args = [REPLAY, "--csv", csv, "--topology", topo]
        for node, a in split.items():
            args += ["--route", "%s=%s" % (node, aggs[a].listen)]
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        sent = json.loads(r.stdout)
        statuses = [a.wait_sunk() for a in aggs]
    finally:
        for a in aggs:
            a.stop()
    # Both shards hold rows; together exactly the records sent (raw count: no copy of any row).
    per_shard = [int(ch.query(i, "SELECT count() FROM %s.flowlets_local" % db)) for i in range(2)]
    assert all(n > 0 for n in per_shard), per_shard
    assert sum(per_shard) == sent["records"], (per_shard, sent)
    assert sum(s["clickhouse"]["sunk_rows"] for s in statuses) == sent["records"]

    want = analyze("--input", csv, "--topology", topo)
    assert want["jobs"], "the sample has no job offline: %s" % sample
    for i in range(2):
        got = analyze("--clickhouse", ch.url(i, database=db, cluster=True))
        assert got == want, "%s via server %d:\n%s\n!=\n%s" % (sample, i, json.dumps(got)[:2000],
                                                                 json.dumps(want)[:2000])
    lo, hi = (int(x) for x in ch.query(0, "SELECT min(first_ns), max(last_ns) FROM %s.flowlets" % db).split())
    url = ch.url(0, database=db, cluster=True)
    assert analyze("--clickhouse", url, "--since", str(lo), "--until", str(hi)) == want
    assert analyze("--clickhouse", url, "--since", str(hi + 1)) == {"jobs": []}
    # Sharded by job: N analysers' jobs are disjoint and together exactly the unsharded analysis' jobs.
    by_id = sorted(want["jobs"], key=lambda j: j["id"])
    for n in (2, 3):
        shards = [analyze("--clickhouse", url, "--shard", "%d/%d" % (k, n))["jobs"] for k in range(n)]
        union = sorted((j for sh in shards for j in sh), key=lambda j: j["id"])
        assert union == by_id, "%s --shard */%d: %s" % (sample, n, [[j["id"] for j in sh] for sh in shards])
        print("%s --shard K/%d: jobs per shard %s" % (sample, n, [len(sh) for sh in shards]))
    jobs = [(len(j["nodes"]), len(j["iterations"])) for j in want["jobs"]]
    print("%s: %d records over shards %s; %d job(s) (nodes, iterations) %s identical from ClickHouse"
          % (sample, sent["records"], per_shard, len(want["jobs"]), jobs))


def main():
    tmp = tempfile.mkdtemp(prefix="np-ch-two-")
    try:
        with Servers(2) as ch:
            for sample, split in CASES.items():
                check(ch, tmp, sample, split)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
