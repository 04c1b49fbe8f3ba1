#!/usr/bin/python3
"""Retired jobs (issue 20, bounded history): a job that ended leaves the live view's memory and is still
answered from the store, also after a restart.

A real netprism-aggregator with a 3 s analysis window receives a short simulated DP2 x PP2 job (netprism-sim
`stream --realtime`). While it runs, its timeline is read from the live view; once its connections have been
silent for the window, the analysis forgets it and the daemon retires it: `status` shows no live job, and
`jobs`, `job`, `timeline`, `diagnose` still answer for it from the store -- the same iterations as seen live,
no longer "running". After a restart (which loads no job history) the answers are the same.

usage: job_retire_test.py SIM AGGREGATOR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from nplocal import Query, free_ports  # noqa: E402


class Daemon:
    def __init__(self, agg_bin, work):
        self.ingest, self.query = (f"tcp://127.0.0.1:{p}" for p in free_ports(2))
        self.proc = subprocess.Popen(
            [agg_bin, "--listen", self.ingest, "--query", self.query, "--data-dir", os.path.join(work, "data"),
             "--insecure", "--analysis-window-s", "3"],
            stdout=open(os.path.join(work, "agg.log"), "a"), stderr=subprocess.STDOUT)
        self.ask = Query(self.query)

    def call(self, req):
        return self.ask(req)


    def wait_up(self):
        deadline = time.time() + 20
        while self.call({"cmd": "status"}) is None:
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("aggregator did not come up")
            time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def answers(d, jid):
    """What the store answers for the job: its jobs entry, detail, timeline and findings."""
    entry = next((j for j in (d.call({"cmd": "jobs"}) or {"jobs": []})["jobs"] if j["id"] == jid), None)
    return (entry, d.call({"cmd": "job", "id": jid}), d.call({"cmd": "timeline", "id": jid}),
            d.call({"cmd": "diagnose", "id": jid}))


def run(sim_bin, agg_bin, work):
    d = Daemon(agg_bin, work)
    daemons = [d]
    try:
        d.wait_up()
        sim = subprocess.run([sim_bin, "stream", "--realtime", "--aggregator", d.ingest, "--nodes", "4", "--job",
                              "dp=2,pp=2,mb=4,sched=1f1b,iters=15"], capture_output=True, text=True, timeout=120)
        if sim.returncode != 0:
            print("netprism-sim failed:", sim.stdout, sim.stderr)
            return 1
        live = None
        deadline = time.time() + 30
        while time.time() < deadline:
            jobs = d.call({"cmd": "jobs"}) or {"jobs": []}
            st = d.call({"cmd": "status"}) or {}
            if jobs["jobs"] and st.get("analysis", {}).get("jobs", 1) == 0:
                break  # listed, but no longer in the live view: retired
            if jobs["jobs"] and live is None:
                live = d.call({"cmd": "timeline", "id": jobs["jobs"][0]["id"]})
            time.sleep(0.5)
        else:
            print("FAIL: the job was not retired within 30 s:", d.call({"cmd": "jobs"}), d.call({"cmd": "status"}))
            return 1
        jid = jobs["jobs"][0]["id"]
        entry, detail, timeline, diag = answers(d, jid)
        ok = True
        # Not "running" any more: "ended", or what the analysis judged before it retired (the simulator stops
        # without tearing its connections down, which the live analysis reports as a hang).
        if entry is None or entry["state"] not in ("ended", "hung", "idle") or entry["iterations"] < 10:
            print("FAIL: retired job entry:", entry)
            ok = False
        if not detail or detail.get("parallelism", {}).get("dp") != 2 or detail["parallelism"].get("pp") != 2:
            print("FAIL: retired job detail:", detail)
            ok = False
        if not timeline or len(timeline["iterations"]) != entry["iterations"]:
            print("FAIL: retired timeline:", timeline)
            ok = False
        elif live and live["iterations"] and live["iterations"][0] != timeline["iterations"][0]:
            print("FAIL: stored timeline starts elsewhere than the live one:", live["iterations"][0],
                  timeline["iterations"][0])
            ok = False
        # Paged: 4 iterations at a time, following next_from, gives the same timeline.
        paged, req = [], {"cmd": "timeline", "id": jid, "limit": 4}
        for _ in range(100):
            page = d.call(req) or {}
            paged += page.get("iterations", [])
            if "next_from" not in page:
                break
            req = {"cmd": "timeline", "id": jid, "limit": 4, "from": page["next_from"]}
        if not timeline or paged != timeline["iterations"]:
            print("FAIL: paged timeline differs:", len(paged), "iterations")
            ok = False
        if diag is None:
            print("FAIL: no diagnosis for the retired job")
            ok = False
        d.stop()
        d = Daemon(agg_bin, work)
        daemons.append(d)
        d.wait_up()
        after = answers(d, jid)
        if after != (entry, detail, timeline, diag):
            print("FAIL: answers changed across a restart:\n", (entry, detail, timeline, diag), "\n", after)
            ok = False
        if ok:
            print(f"retired {jid}: {entry['iterations']} iterations answered from the store, also after a restart")
        return 0 if ok else 1
    finally:
        for x in daemons:
            x.stop()


def main():
    work = tempfile.mkdtemp(prefix="np-retire-")
    try:
        rc = run(sys.argv[1], sys.argv[2], work)
        if rc:
            print(open(os.path.join(work, "agg.log")).read()[-3000:])
        return rc
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
