#!/usr/bin/env python3
"""Issue 23 acceptance: ClickHouse killed (SIGKILL) for 60 s mid-run loses nothing and doubles nothing.

One aggregator with --clickhouse takes a steady load from netprism-sim's virtual agents (real wire protocol)
for OUTAGE + 20 s; 10 s in, its clickhouse-server is killed and started again OUTAGE s later (default 60).
Meanwhile the aggregator must keep acknowledging (the ACK never waits for ClickHouse), count the errors and the
pending batches in `status`, and afterwards catch up by itself. Then, per (node, epoch, seq), the rows in
ClickHouse -- counted raw, without FINAL, so a copy merged away later would still show -- equal the records of
that batch in the local store, which holds exactly what the agents had acknowledged. Finally the aggregator
is restarted without its high-water mark: it must find every batch in ClickHouse already and insert none.

usage: outage_test.py NETPRISM NETPRISM_AGGREGATOR NETPRISM_SIM [OUTAGE_S]"""
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

CLI, AGG, SIM = sys.argv[1:4]
OUTAGE = int(sys.argv[4]) if len(sys.argv) > 4 else 60


def main():
    tmp = tempfile.mkdtemp(prefix="np-ch-outage-")
    agg = sim = None
    try:
        with Servers(1) as ch:
            agg = Aggregator(AGG, CLI, tmp, "agg", ["--clickhouse", ch.url(0)])
            duration = OUTAGE + 20
            # 4 agents x 1,000 records/s: ~4 inserts/s into ClickHouse, light enough for a shared 2-core CI box.
            sim = subprocess.Popen([SIM, "load", "--aggregator", agg.listen, "--agents", "4", "--rate", "1000",
                                    "--duration", str(duration)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
            time.sleep(10)
            before = agg.status()["clickhouse"]
            assert before["sunk_batches"] > 0, before
            ch.kill(0)
            t_kill = time.time()
            time.sleep(OUTAGE / 2)
            mid = agg.status()
            time.sleep(OUTAGE - (time.time() - t_kill))
            ch.start(0)
            print("outage %.0f s; mid-outage status: %s" % (time.time() - t_kill, json.dumps(mid["clickhouse"])))
            assert mid["clickhouse"]["errors"] > before["errors"], mid["clickhouse"]
            assert mid["clickhouse"]["pending_batches"] > 0, mid["clickhouse"]
            assert mid["ingest"]["batches_stored"] > 0
            out, _ = sim.communicate(timeout=duration + 120)
            sim_rc = sim.returncode
            sim = None
            print(out.strip().splitlines()[-1])
            assert sim_rc == 0 and "all_acked=yes" in out, out[-2000:]
            st = agg.wait_sunk(timeout=180)
            print("after: %s" % json.dumps(st["clickhouse"]))
            agg.stop()
            # A crash between an insert and the mark's update, at its worst: the mark is gone, so the restarted
            # sink re-reads the whole store -- and must find every batch already there, inserting none again.
            os.remove(os.path.join(agg.data_dir, "clickhouse.hwm"))
            agg = Aggregator(AGG, CLI, tmp, "agg", ["--clickhouse", ch.url(0)])
            again = agg.wait_sunk(timeout=180)["clickhouse"]
            agg.stop()
            assert again["sunk_batches"] == 0 and again["already_there"] == st["store"]["batches"], again
            db = sqlite3.connect("file:%s?mode=ro" % os.path.join(agg.data_dir, "netprism.db"), uri=True)
            local = {(n, e, s): r for n, e, s, r in db.execute("SELECT node, epoch, seq, records FROM batches")}
            rows = ch.query(0, "SELECT node, epoch, seq, count() FROM netprism.flowlets "
                               "GROUP BY node, epoch, seq FORMAT TabSeparated")
            remote = {}
            for line in rows.splitlines():
                n, e, s, c = line.split("\t")
                remote[(n, int(e), int(s))] = int(c)
            missing = [k for k in local if local[k] > 0 and k not in remote]
            wrong = [(k, local[k], remote[k]) for k in remote if remote[k] != local.get(k)]
            assert not missing, "%d batches missing in ClickHouse, e.g. %s" % (len(missing), missing[:3])
            assert not wrong, "%d batches with other row counts (local, clickhouse), e.g. %s" % (len(wrong), wrong[:3])
            total = sum(local.values())
            acked = int(out.split("records_acked=")[1].split()[0])
            assert total == acked, (total, acked)
            print("%d batches, %d records: every one in ClickHouse exactly once; after a restart without the mark "
                  "%d found already there, none inserted again"
                  % (len(local), total, again["already_there"]))
    finally:
        if sim and sim.poll() is None:
            sim.kill()
            sim.wait()
        if agg:
            agg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
