#!/usr/bin/env python3
"""Issue 23 with issue 16's counters-only agents: RDMA records reach ClickHouse and its analysis.

On NICs whose RDMA bypasses the probe, a job is seen only through the agents' RDMA port bursts and QP tables
(batches with few or no flowlets). A real counters-only soft-RoCE recording (tests/data/roce_dp2_straggler/
counters, an OpenMPI/UCX DP2 run in the rdmabed VMs) is the store of an aggregator started with --clickhouse:
its sink copies the whole store. Then:
  - the rdma table holds exactly the rows the sink inserted, one per batch with RDMA records (no copy);
  - `netprism analyze --clickhouse` gives exactly the document `netprism analyze --input` gives for the
    recording (same jobs, groups and timeline: the counters source sees the same bursts and QP rows), also
    through a Distributed table over a two-shard cluster;
  - the analysis role (--analyze-from-clickhouse) names the job as the offline analysis does: same id,
    nodes, parallelism and source `counters`, from the rdma table alone (the recording has no flowlets);
  - the same aggregator restarted without its high-water mark: its batches without flowlets are inserted
    again (the duplicate check asks the flowlets table), and FINAL reads one row per batch, the document
    unchanged.

usage: rdma_test.py NETPRISM NETPRISM_AGGREGATOR RECORDING_DB_GZ"""
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chserver import Servers  # noqa: E402
from daemons import Aggregator  # noqa: E402

CLI, AGG, RECORDING = sys.argv[1:4]


def analyze(*args):
    r = subprocess.run([CLI, "analyze", "--json"] + list(args), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_tables(ch, i, db, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ch.query(i, "SELECT count() FROM system.tables WHERE database = '%s' AND name = 'rdma_local'" % db) \
                .strip() == "1":
            return
        time.sleep(0.3)
    raise AssertionError("no %s.rdma_local on server %d" % (db, i))


def role(url, tmp, want, first_ns):
    """The analysis role over the same database names the job the offline analysis names: same id, nodes,
    parallelism and source (counters) -- from the rdma table alone, since the recording has no flowlets."""
    # The recording is days old: a window reaching back to it (a live analysis drops what is older).
    age_s = int(time.time() - first_ns / 1e9) + 3600
    a = Aggregator(AGG, CLI, tmp, "role", ["--analyze-from-clickhouse", url, "--analysis-window-s", str(age_s),
                                           "--analysis-interval-ms", "250"])
    expect = {(j["id"], tuple(j["nodes"]), j["source"], json.dumps(j["parallelism"], sort_keys=True))
              for j in want["jobs"]}
    try:
        q = [CLI, "--insecure", "--aggregator", a.query, "--timeout", "5"]
        deadline, got = time.time() + 60, None
        while time.time() < deadline:
            r = subprocess.run(q + ["jobs", "--json"], capture_output=True, text=True, timeout=60)
            jobs = json.loads(r.stdout)["jobs"] if r.returncode == 0 else []
            got = set()
            for j in jobs:
                d = subprocess.run(q + ["job", j["id"], "--json"], capture_output=True, text=True, timeout=60)
                if d.returncode == 0:
                    p = json.loads(d.stdout).get("parallelism")
                    got.add((j["id"], tuple(j["nodes"]), j["source"], json.dumps(p, sort_keys=True)))
            if got == expect:
                break
            time.sleep(0.5)
        assert got == expect, "the analysis role: %s, offline: %s\n%s" % (got, expect, open(a.log).read()[-1500:])
        print("analysis role: %s, as offline" % sorted(got))
    finally:
        a.stop()


def main():
    tmp = tempfile.mkdtemp(prefix="np-ch-rdma-")
    try:
        data = os.path.join(tmp, "agg")
        os.makedirs(data)
        db = os.path.join(data, "netprism.db")
        with gzip.open(RECORDING) as src, open(db, "wb") as dst:
            shutil.copyfileobj(src, dst)
        with sqlite3.connect(db) as c:
            batches = c.execute("SELECT count(*) FROM batches").fetchone()[0]
        want = analyze("--input", db)
        assert want["jobs"], "the recording has no job offline"
        with Servers(2) as ch:
            for name, url in (("single", ch.url(0, database="np_rdma")),
                              ("cluster", ch.url(0, database="np_rdma_c", cluster=True))):
                if name == "cluster":  # every shard needs the _local tables: an aggregator creates them there
                    other = Aggregator(AGG, CLI, tmp, "other", ["--clickhouse",
                                                                 ch.url(1, database="np_rdma_c", cluster=True)])
                    try:
                        wait_tables(ch, 1, "np_rdma_c")
                    finally:
                        other.stop()
                agg = Aggregator(AGG, CLI, tmp, "agg", ["--clickhouse", url])
                try:
                    st = agg.wait_sunk(timeout=240)
                finally:
                    agg.stop()
                assert st["store"]["batches"] == batches, (st["store"], batches)
                # A fresh database: every row inserted once (raw count, no FINAL), as many as the sink sent.
                expect = st["clickhouse"]["sunk_rdma_rows"]
                assert expect > 0, "%s: no rdma rows sunk: %s" % (name, st["clickhouse"])
                table = "np_rdma.rdma" if name == "single" else "np_rdma_c.rdma"
                rows = int(ch.query(0, "SELECT count() FROM %s" % table))
                assert rows == expect, "%s: %d rdma rows, the sink inserted %d" % (name, rows, expect)
                got = analyze("--clickhouse", url)
                assert got == want, "%s:\n%s\n!=\n%s" % (name, json.dumps(got)[:2000], json.dumps(want)[:2000])
                print("%s: %d rdma rows (of %d batches), %d job(s), same document as --input"
                      % (name, rows, batches, len(got["jobs"])))
                if name == "single":
                    rows_single = rows
                    role(url, tmp, want, int(ch.query(0, "SELECT min(first_ns) FROM np_rdma.rdma")))
                os.remove(os.path.join(data, "clickhouse.hwm"))
            # Restarted without its mark: every batch asked for again, none inserted twice (FINAL).
            url = ch.url(0, database="np_rdma")
            agg = Aggregator(AGG, CLI, tmp, "agg", ["--clickhouse", url])
            try:
                agg.wait_sunk(timeout=240)
            finally:
                agg.stop()
            final = int(ch.query(0, "SELECT count() FROM np_rdma.rdma FINAL"))
            assert final == rows_single, (final, rows_single)
            assert analyze("--clickhouse", url) == want
            print("restart without mark: %d rdma rows (FINAL), document unchanged" % final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
