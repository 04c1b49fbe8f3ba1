#!/usr/bin/python3
"""Operators' endpoints of a live aggregator (issue 19), against real tools.

A real netprism-aggregator (--http with a bearer token file, --webhook to a local receiver) takes a simulated
DP2 x PP2 job with a straggler (node 1, 1.6x slower from iteration 10), played in real time by netprism-sim
(virtual agents over real DEALER sockets). A real Prometheus server (Debian `prometheus`, its own temp dir and
free port, killed after) scrapes /metrics every second meanwhile. Checks:
- `promtool check metrics` finds nothing wrong with /metrics, which carries the contract's metric names;
- Prometheus's last samples of netprism_job_step_seconds{stat="last"|"median"} and
  netprism_job_iterations_total equal what `netprism timeline` shows (last duration, median, count), and
  the series has samples over the run, non-decreasing iterations;
- every /api/v1 document equals the CLI's --json document for the same state; no token / a wrong token ->
  401; unknown job -> 404;
- the scheduler's tenants file attributes the job: "tenant"/"job_name" in the jobs and report documents,
  netprism_job_info{tenant,job_name} in Prometheus;
- the webhook receiver got every finding of the run (as `netprism diagnose` lists them at the end) exactly
  once, a job_state event for the job's appearance and each state change, and no event twice.

usage: operators_live_test.py SIM AGGREGATOR NETPRISM
"""
import http.server
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from nplocal import free_ports  # noqa: E402

TOKEN = "t0ken-for-the-test"
CONTRACT_METRICS = ["netprism_job_step_seconds", "netprism_job_iterations_total", "netprism_job_state",
                    "netprism_findings", "netprism_ingest_records_total", "netprism_agent_connected"]
# Fields of `status` and `report` that move with the clock between two reads of the same state.
VOLATILE = {"now_ns", "analysed_ns", "last_run_ns", "took_ms", "hours_observed", "node_hours", "node_hours_lost",
            "hang", "total", "time_lost_share", "last_seen_ns", "lag_ns", "commit_seconds_sum", "commits",
            "last_commit_latency_ns", "messages", "heartbeats", "counters", "clock_offset_ns", "connected",
            "memory"}


def strip(doc):
    if isinstance(doc, dict):
        return {k: strip(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [strip(v) for v in doc]
    return doc


class Hooks(http.server.BaseHTTPRequestHandler):
    events = []
    lock = threading.Lock()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with Hooks.lock:
            Hooks.events.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # local servers: no proxy


def http_get(url, token=None):
    """(HTTP status, body); status 0 when nothing answers (yet)."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with OPENER.open(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError) as e:
        return 0, str(e)


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise Fail("timed out waiting for " + what)


class Run:
    """One aggregator (with --http, token and webhook), one Prometheus scraping it, one simulated job."""

    def __init__(self, sim_bin, agg_bin, cli_bin, work):
        self.sim_bin, self.agg_bin, self.cli_bin, self.work = sim_bin, agg_bin, cli_bin, work
        self.prom_bin, self.promtool = shutil.which("prometheus"), shutil.which("promtool")
        ingest_p, query_p, self.http_p, prom_p, self.hook_p = free_ports(5)
        self.ingest, self.query = f"tcp://127.0.0.1:{ingest_p}", f"tcp://127.0.0.1:{query_p}"
        self.base = f"http://127.0.0.1:{self.http_p}"
        self.prom_p = prom_p
        self.papi = f"http://127.0.0.1:{prom_p}/api/v1/"
        self.procs = []

    def spawn(self, args, log):
        p = subprocess.Popen(args, stdout=open(os.path.join(self.work, log), "w"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def cli(self, *args):
        r = subprocess.run([self.cli_bin, "--aggregator", self.query, "--insecure", "--json", *args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30)
        check(r.returncode == 0, f"netprism {' '.join(args)}: {r.stderr}")
        return json.loads(r.stdout)

    def prom_query(self, q):
        code, body = http_get(self.papi + "query?" + urllib.parse.urlencode({"query": q}))
        check(code == 200, f"prometheus query {q}: HTTP {code} {body[:200]}")
        return json.loads(body)["data"]["result"]

    def start(self):
        token = os.path.join(self.work, "token")
        with open(token, "w") as f:
            f.write(TOKEN + "\n")
        tenants = os.path.join(self.work, "tenants")  # as a scheduler would write it
        with open(tenants, "w") as f:
            f.write("# node tenant job-name\n" + "".join(f"node-{i:04d} acme llm-7b\n" for i in range(4)))
        self.spawn([self.agg_bin, "--listen", self.ingest, "--query", self.query, "--data-dir",
                    os.path.join(self.work, "data"), "--http", f"127.0.0.1:{self.http_p}", "--http-token", token,
                    "--webhook", f"http://127.0.0.1:{self.hook_p}/hook", "--tenants", tenants,
                    # the simulated agents (bench/scale's simulator) speak plain TCP
                    "--insecure"], "agg.log")
        wait_for(lambda: http_get(self.base + "/metrics")[0] == 200, 20, "the aggregator's /metrics")
        conf = os.path.join(self.work, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                    f"  - job_name: netprism\n    static_configs:\n      - targets: ['127.0.0.1:{self.http_p}']\n")
        self.spawn([self.prom_bin, "--config.file", conf, "--storage.tsdb.path", os.path.join(self.work, "tsdb"),
                    "--web.listen-address", f"127.0.0.1:{self.prom_p}"], "prom.log")
        wait_for(lambda: http_get(self.papi + "targets")[0] == 200 and
                 any(r["value"][1] == "1" for r in self.prom_query('up{job="netprism"}')), 60, "prometheus scraping")

    def train(self):
        """~0.4 s steps, 45 iterations: ~20 s of training with the straggler from iteration 10. Returns the job."""
        self.t_start = time.time()
        sim = subprocess.run([self.sim_bin, "stream", "--realtime", "--aggregator", self.ingest, "--nodes", "4",
                              "--job", "dp=2,pp=2,mb=4,sched=1f1b,iters=45",
                              "--fault", "job=0,kind=straggler,node=1,factor=1.6,from=10"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        check(sim.returncode == 0, "netprism-sim failed: " + sim.stdout[-500:])

        def straggler_found():
            jobs = self.cli("jobs")["jobs"]
            return jobs and any(f["kind"] == "straggler" for f in self.cli("diagnose", jobs[0]["id"])["findings"])

        wait_for(straggler_found, 30, "the straggler finding")
        time.sleep(4)  # a few more passes and scrapes of the final state
        return self.cli("jobs")["jobs"][0]["id"]

    def check_metrics(self):
        """/metrics: well-formed by promtool's reading, with the contract's names."""
        code, text = http_get(self.base + "/metrics")
        check(code == 200, f"/metrics: HTTP {code}")
        pc = subprocess.run([self.promtool, "check", "metrics"], input=text, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
        check(pc.returncode == 0 and not pc.stdout.strip(), "promtool check metrics: " + pc.stdout)
        for name in CONTRACT_METRICS:
            check(f"\n{name}{{" in text or f"\n{name} " in text, f"/metrics lacks {name}")

    def check_prometheus(self, job):
        """Prometheus's view of the step time == `netprism timeline` (the run is over, the state settled)."""
        durations = [it["duration_ns"] / 1e9 for it in self.cli("timeline", job)["iterations"]]
        time.sleep(2.5)  # two more scrapes
        sel = f'job_id="{job}"'
        last = self.prom_query(f'netprism_job_step_seconds{{{sel},stat="last"}}')
        med = self.prom_query(f'netprism_job_step_seconds{{{sel},stat="median"}}')
        iters = self.prom_query(f"netprism_job_iterations_total{{{sel}}}")
        check(last and med and iters, "prometheus has no step-time series for " + job)
        check(abs(float(last[0]["value"][1]) - durations[-1]) < 1e-6,
              f"last step {last[0]['value'][1]} != timeline's {durations[-1]}")
        check(abs(float(med[0]["value"][1]) - statistics.median(durations)) < 1e-6,
              f"median step {med[0]['value'][1]} != timeline's {statistics.median(durations)}")
        check(int(float(iters[0]["value"][1])) == len(durations),
              f"iterations {iters[0]['value'][1]} != timeline's {len(durations)}")
        rng = int(time.time() - self.t_start) + 1
        values = [float(v) for _, v in self.prom_query(f"netprism_job_iterations_total{{{sel}}}[{rng}s]")[0]["values"]]
        check(len(values) >= 10, f"only {len(values)} samples of the iterations series during the run")
        check(values == sorted(values), "iterations_total went down during the run")
        straggler = self.prom_query(f'netprism_findings{{{sel},kind="straggler"}}')
        check(straggler and float(straggler[0]["value"][1]) >= 1, "prometheus shows no straggler finding")
        info = self.prom_query(f'netprism_job_info{{{sel},tenant="acme",job_name="llm-7b"}}')
        check(info, "prometheus has no netprism_job_info with the job's tenant")
        return len(durations), len(values)

    def check_api(self, job):
        """The CLI's documents; 401 without or with a wrong token; 404 for an unknown job and for raw flows."""
        for path in ["status", "jobs", "report", f"job/{job}", f"timeline/{job}", f"diagnose/{job}"]:
            check(http_get(f"{self.base}/api/v1/{path}")[0] == 401, f"/api/v1/{path} without a token is not 401")
            check(http_get(f"{self.base}/api/v1/{path}", "wrong")[0] == 401, f"/api/v1/{path}: wrong token not 401")
            # status and report carry the time of the query (now_ns, hours observed so far): equal up to the
            # fields that move with the clock. The others are equal byte for byte to a CLI answer given just
            # before or after (a pass in between can change analysed_ns: then try again).
            exact = path not in ("status", "report")
            for _ in range(10):
                before = self.cli(*path.split("/"))
                code, body = http_get(f"{self.base}/api/v1/{path}", TOKEN)
                after = self.cli(*path.split("/"))
                check(code == 200, f"/api/v1/{path}: HTTP {code}")
                doc = json.loads(body)
                same = doc in (before, after) if exact else strip(doc) in (strip(before), strip(after))
                if same:
                    break
            check(same, f"/api/v1/{path} differs from the CLI: {body[:300]}")
            check(set(doc) == set(before), f"/api/v1/{path} has other keys than the CLI's document")
        for path in ["jobs", "report"]:
            entry = json.loads(http_get(f"{self.base}/api/v1/{path}", TOKEN)[1])["jobs"][0]
            check(entry.get("tenant") == "acme" and entry.get("job_name") == "llm-7b",
                  f"/api/v1/{path}: no tenant attribution in {entry}")
        check(http_get(f"{self.base}/api/v1/job/nosuchjob", TOKEN)[0] == 404, "unknown job is not 404")
        check(http_get(f"{self.base}/api/v1/flows", TOKEN)[0] == 404, "raw flows must not be served over HTTP")

    def check_webhooks(self, job):
        """Every finding exactly once, the job's appearance and state changes, no event twice."""
        findings = self.cli("diagnose", job)["findings"]
        wait_for(lambda: sum(e["event"] == "finding" for e in Hooks.events) >= len(findings), 15,
                 "the webhook deliveries")
        time.sleep(1)
        with Hooks.lock:
            events = list(Hooks.events)
        ids = [e["id"] for e in events]
        check(len(ids) == len(set(ids)), "an event was delivered twice")

        def key(f):
            return f["kind"], f["subject"], f["first_iteration"] if f["kind"] == "slow_iteration" else 0

        got = [(e["job"], *key(e["finding"])) for e in events if e["event"] == "finding"]
        check(len(got) == len(set(got)), f"a finding was announced twice: {got}")
        for w in [(job, *key(f)) for f in findings]:
            check(w in got, f"finding {w} was not announced (got {got})")
        states = [e for e in events if e["event"] == "job_state" and e["job"] == job]
        check(states and states[0]["previous"] is None, "no job_state event for the job's appearance")
        for a, b in zip(states, states[1:]):
            check(b["previous"] == a["state"] and b["state"] != a["state"], "job_state events do not chain")
        # The job's state as the CLI shows it reaches the receiver within a pass or two (it may change just now,
        # as a finished run turns hung).
        def last_state_delivered():
            with Hooks.lock:
                mine = [e for e in Hooks.events if e["event"] == "job_state" and e["job"] == job]
            return mine[-1]["state"] == self.cli("jobs")["jobs"][0]["state"]

        wait_for(last_state_delivered, 10, "the job's current state as a webhook event")
        return len(findings), len(events)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("prometheus/promtool not installed (scripts/setup installs them)", file=sys.stderr)
        return 1
    work = tempfile.mkdtemp(prefix="np-operators-")
    run = Run(*sys.argv[1:4], work)
    hook_srv = http.server.ThreadingHTTPServer(("127.0.0.1", run.hook_p), Hooks)
    threading.Thread(target=hook_srv.serve_forever, daemon=True).start()
    try:
        run.start()
        job = run.train()
        run.check_metrics()
        iterations, samples = run.check_prometheus(job)
        run.check_api(job)
        findings, events = run.check_webhooks(job)
        print(json.dumps({"job": job, "iterations": iterations, "findings": findings, "webhook_events": events,
                          "prometheus_samples": samples}))
        return 0
    except Fail as e:
        print("FAIL: " + str(e), file=sys.stderr)
        for log in ["agg.log", "prom.log"]:
            p = os.path.join(work, log)
            if os.path.exists(p):
                print(f"--- {log} (tail)", file=sys.stderr)
                print(open(p).read()[-3000:], file=sys.stderr)
        return 1
    finally:
        hook_srv.shutdown()
        run.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
