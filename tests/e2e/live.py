#!/usr/bin/python3
"""Live mode of the testbed: one `netprism-agent` per namespace on its veth, one `netprism-aggregator` on the
host (listening on the bridge address), queried with the `netprism` CLI (contracts.md).

Used by testbed.py run --live. The agents reach the aggregator over the same veth the training uses (as on a
real cluster, where the agents share the node's NIC); the agent excludes its own traffic.
"""
import json
import os
import random
import socket
import subprocess
import time

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def default_bin(name):
    """build/<dir>/<name> of this checkout, else PATH."""
    sub = {"netprism-agent": "agent", "netprism-aggregator": "aggregator", "netprism": "aggregator"}[name]
    cand = os.path.join(REPO, "build", sub, name)
    return cand if os.access(cand, os.X_OK) else name


def ephemeral_range():
    try:
        lo, hi = open("/proc/sys/net/ipv4/ip_local_port_range").read().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def bindable(ip, port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ binds: TIME_WAIT is no conflict
        try:
            s.bind((ip, port))
            return True
        except OSError:
            return False


def free_port_pair(ingest_ip):
    """port for the ingest on ingest_ip and port+1 for the query on 127.0.0.1.

    Drawn from 10000..19999, below both the kernel's ephemeral range and the training's gloo master ports
    (testbed.py: 20000..39999). Ephemeral ports are where every outgoing connection on the host and every gloo
    pair listener in the namespaces get theirs: one holding ours made the aggregator exit with 'cannot bind'
    (seen once in CI), and the aggregator drops flows on its own ports by port alone, so a gloo pair on the same
    number would have vanished from the analysis. Test-bound here; start() still retries, as another process
    can take the port between this check and the aggregator's bind."""
    lo, _ = ephemeral_range()
    first, last = 10000, min(20000, lo) - 2
    for _ in range(200):
        port = random.randrange(first, last)
        if bindable(ingest_ip, port) and bindable("127.0.0.1", port + 1):
            return port
    raise RuntimeError(f"no free port pair in {first}..{last}")


def log_tail(path, lines=8):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError as e:
        return f"({e})"


def make_keys(netprism, keys_dir, nodes):
    """CURVE like a real install (issue 18): the aggregator's key, one agent key per node bound to that node,
    an admin client key for the CLI. Returns keys_dir."""
    os.makedirs(keys_dir, exist_ok=True)
    for name in ["server", "admin"] + list(nodes):
        if not os.path.exists(os.path.join(keys_dir, name + ".key")):
            subprocess.run([netprism, "keygen", "--out", os.path.join(keys_dir, name)], check=True,
                           capture_output=True, text=True)

    def pub(name):
        with open(os.path.join(keys_dir, name + ".pub")) as f:
            return f.read().strip()
    with open(os.path.join(keys_dir, "agents"), "w") as f:
        f.writelines(f"{n} {pub(n)}\n" for n in nodes)
    with open(os.path.join(keys_dir, "clients"), "w") as f:
        f.write(f"admin {pub('admin')}\n")
    return keys_dir


class LiveStack:
    def __init__(self, cluster, out, agent=None, aggregator=None, netprism=None):
        self.c = cluster
        self.out = out
        self.agent = agent or default_bin("netprism-agent")
        self.aggregator = aggregator or default_bin("netprism-aggregator")
        self.netprism = netprism or default_bin("netprism")
        self.pick_ports()
        self.agg_proc = None
        self.agents = {}
        self.attached = False
        self.events = []  # (time, what) observed while polling
        self.keys = None  # CURVE keys dir (make_keys), set by start() or attach()

    def cli_auth(self):
        """The CLI's CURVE flags (the admin client key)."""
        return ["--key", os.path.join(self.keys, "admin.key"), "--server-pub", os.path.join(self.keys, "server.pub")]

    def pick_ports(self):
        port = free_port_pair(self.c.host_ip)
        self.ingest = f"tcp://{self.c.host_ip}:{port}"
        self.query = f"tcp://127.0.0.1:{port + 1}"

    def cli(self, *args, timeout=15):
        r = subprocess.run([self.netprism, "--aggregator", self.query] + self.cli_auth() + list(args) + ["--json"],
                           text=True,
                           capture_output=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"netprism {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    @classmethod
    def attach(cls, cluster, out):
        """The stack an `up --live` cluster already runs (left running at the end)."""
        live = cluster.extra["live"]
        s = cls(cluster, out, netprism=live.get("netprism"))
        s.ingest, s.query, s.attached, s.keys = live["ingest"], live["query"], True, live.get("keys")
        return s

    def start(self, timeout=30, detach=False):
        """detach: the processes outlive this driver (`up --live`); they are recorded in the cluster's state
        and ended by its teardown."""
        data = os.path.join(self.out, "live", "aggregator")
        os.makedirs(data, exist_ok=True)
        log_path = os.path.join(self.out, "logs", "aggregator.log")
        self.keys = make_keys(self.netprism, os.path.join(self.out, "live", "keys"),
                              [self.c.node(k) for k in range(self.c.n)])
        sec = ["--server-key", os.path.join(self.keys, "server.key"), "--agents", os.path.join(self.keys, "agents"),
               "--clients", os.path.join(self.keys, "clients")]
        for _ in range(3):
            log = open(log_path, "a")
            start = log.tell()
            self.agg_proc = subprocess.Popen([self.aggregator, "--listen", self.ingest, "--query", self.query,
                                              "--data-dir", data] + sec, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=detach)
            self.c.track(self.agg_proc.pid)
            if not self.bind_lost(log_path, start):
                break
            print(f"live: {self.ingest} or {self.query} was taken before the aggregator bound it; new ports",
                  flush=True)
            self.pick_ports()
        for k in range(self.c.n):
            node = self.c.node(k)
            spool = os.path.join(self.out, "live", "spool", node)
            os.makedirs(spool, exist_ok=True)
            alog = open(os.path.join(self.out, "logs", f"agent.{node}.log"), "w")
            self.agents[node] = self.c.popen(k, [self.agent, "--aggregator", self.ingest, "--node", node, "--iface",
                                                 self.c.veth(k), "--spool-dir", spool,
                                                 "--key", os.path.join(self.keys, node + ".key"),
                                                 "--server-pub", os.path.join(self.keys, "server.pub")],
                                             stdout=alog, stderr=subprocess.STDOUT, start_new_session=detach)
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            for node, p in self.agents.items():
                if p.poll() is not None:
                    alog = os.path.join(self.out, "logs", f"agent.{node}.log")
                    raise RuntimeError(f"netprism-agent on {node} exited with {p.returncode} (logs/agent.{node}.log):\n"
                                       f"{log_tail(alog)}")
            if self.agg_proc.poll() is not None:
                raise RuntimeError(f"netprism-aggregator exited with {self.agg_proc.returncode} (logs/aggregator.log):\n"
                                   f"{log_tail(log_path)}")
            try:
                st = self.cli("status", timeout=12)
                up = {a["node"] for a in st.get("agents", []) if a.get("connected")}
                if up >= set(self.agents):
                    self.c.extra["live"] = {"ingest": self.ingest, "query": self.query, "netprism": self.netprism,
                                            "data": os.path.dirname(data), "keys": self.keys}
                    self.c.save()
                    return
                last = f"connected: {sorted(up)}"
            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                last = str(e)
            time.sleep(0.5)
        raise RuntimeError(f"agents did not all connect within {timeout} s ({last})")

    def bind_lost(self, log_path, start, wait=3.0):
        """True when the aggregator exited at start-up because a port was taken (then it is retried on others).
        The aggregator binds both sockets before it reports 'listening', so waiting for either outcome is
        bounded; any other early exit is left to start()'s checks, which report it with the log."""
        deadline = time.time() + wait
        while time.time() < deadline:
            with open(log_path, errors="replace") as f:
                f.seek(start)
                text = f.read()
            if self.agg_proc.poll() is not None:
                return "cannot bind" in text
            if "listening on" in text:
                return False
            time.sleep(0.05)
        return False

    def poll_states(self):
        """Record when each job's state or findings change (hang detection latency)."""
        try:
            jobs = self.cli("jobs", timeout=5).get("jobs", [])
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError):
            return
        now = time.time()
        for j in jobs:
            key = ("state", j.get("id"), j.get("state"))
            if key not in {e[1] for e in self.events}:
                self.events.append((now, key))

    def snapshot(self):
        """netprism's whole view, shaped like `netprism analyze --json`, for the scorer."""
        jobs = []
        for j in self.cli("jobs").get("jobs", []):
            d = dict(j)
            d["parallelism"] = self.cli("job", j["id"]).get("parallelism", {})
            d["iterations"] = self.cli("timeline", j["id"]).get("iterations", [])
            d["findings"] = self.cli("diagnose", j["id"]).get("findings", [])
            jobs.append(d)
        return {"jobs": jobs, "status": self.cli("status"),
                "events": [{"time": t, "what": list(w)} for t, w in self.events]}

    def view(self):
        """The CLI's human-readable view of every job, as a person would ask for it."""
        lines = []

        def run(*args):
            r = subprocess.run([self.netprism, "--aggregator", self.query] + self.cli_auth() + list(args), text=True,
                               capture_output=True, timeout=15)
            lines.append(f"$ netprism {' '.join(args)}")
            lines.append((r.stdout + r.stderr).rstrip())

        run("jobs")
        try:
            ids = [j["id"] for j in self.cli("jobs").get("jobs", [])]
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError):
            ids = []
        for i in ids:
            for cmd in ("job", "timeline", "diagnose"):
                run(cmd, i)
        return "\n".join(lines)

    def stop(self):
        if self.attached:
            return
        for p in list(self.agents.values()) + ([self.agg_proc] if self.agg_proc else []):
            if p.poll() is None:
                p.terminate()
        for p in list(self.agents.values()) + ([self.agg_proc] if self.agg_proc else []):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
