#!/usr/bin/python3
"""Namespace cluster: N "nodes" as network namespaces on one Linux bridge.

Every name carries a per-run id, so runs of several people (or CTest jobs) never collide, and a leftover of a
killed run can be removed by its id alone (`teardown RUNID`), or all leftovers at once (`teardown --all`).

Names (interface names are limited to 15 characters by the kernel, IFNAMSIZ - 1):
  run id      "np" + 5 hex digits, e.g. np3fa1c
  bridge      <id>br          (host)
  namespace   <id>n<k>        (node k, reported as node name n<k>)
  veth        <id>h<k> (host side, a bridge port) <-> <id>v<k> (inside the namespace)
Addresses: a private /24 10.213.X.0/24 with X chosen per run among the subnets no host interface or route uses;
node k is 10.213.X.(k+1), the host's bridge address is 10.213.X.254 (for a live aggregator on the host).

State of a run is kept in /run/netprism-testbed/<id>.json so that `teardown` can also kill the processes it
started (tcpdump, agents) even when the driver died.
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

STATE_DIR = "/run/netprism-testbed"
SUBNET_BASE = "10.213"


def sh(*args, check=True, capture=False, ns=None):
    cmd = list(args)
    if ns:
        cmd = ["ip", "netns", "exec", ns] + cmd
    r = subprocess.run(cmd, check=False, text=True, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout if capture else r.returncode


def new_run_id():
    return "np%05x" % random.randrange(16**5)


def used_subnets():
    """Third octets of 10.213.X.0/24 already in use by any host address or route (other runs, other tools)."""
    used = set()
    out = sh("ip", "-4", "-o", "addr", "show", capture=True) + sh("ip", "-4", "route", "show", "table", "all",
                                                                    capture=True, check=False)
    for tok in out.split():
        tok = tok.split("/")[0]
        if tok.startswith(SUBNET_BASE + "."):
            try:
                used.add(int(tok.split(".")[2]))
            except (IndexError, ValueError):
                pass
    return used


class Cluster:
    def __init__(self, run_id, n_nodes, octet):
        self.run_id = run_id
        self.n = n_nodes
        self.octet = octet
        self.pids = []  # processes to kill at teardown (tcpdump, agents, trainers)
        self.extra = {}  # e.g. "live": endpoints of an agent/aggregator stack started with the cluster

    # --- names -------------------------------------------------------------------------------------------
    @property
    def bridge(self):
        return f"{self.run_id}br"

    def node(self, k):
        return f"n{k}"

    def ns(self, k):
        return f"{self.run_id}n{k}"

    def host_veth(self, k):
        return f"{self.run_id}h{k}"

    def veth(self, k):
        return f"{self.run_id}v{k}"

    def ip(self, k):
        return f"{SUBNET_BASE}.{self.octet}.{k + 1}"

    @property
    def host_ip(self):
        return f"{SUBNET_BASE}.{self.octet}.254"

    def nodes(self):
        return [self.node(k) for k in range(self.n)]

    def index(self, node):
        if not (node.startswith("n") and node[1:].isdigit() and int(node[1:]) < self.n):
            raise ValueError(f"unknown node {node!r} (cluster has n0..n{self.n - 1})")
        return int(node[1:])

    def topology(self):
        return "".join(f"{self.ip(k)} {self.node(k)}\n" for k in range(self.n))

    # --- state -------------------------------------------------------------------------------------------
    def state_path(self):
        return os.path.join(STATE_DIR, self.run_id + ".json")

    def save(self):
        os.makedirs(STATE_DIR, exist_ok=True)
        tmp = self.state_path() + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"run_id": self.run_id, "n": self.n, "octet": self.octet, "pids": self.pids,
                       "nodes": {self.node(k): {"ns": self.ns(k), "veth": self.veth(k), "host_veth":
                                                self.host_veth(k), "ip": self.ip(k)} for k in range(self.n)},
                       "bridge": self.bridge, "host_ip": self.host_ip, "extra": self.extra}, f, indent=1)
        os.replace(tmp, self.state_path())

    @classmethod
    def load(cls, run_id):
        with open(os.path.join(STATE_DIR, run_id + ".json")) as f:
            st = json.load(f)
        c = cls(st["run_id"], st["n"], st["octet"])
        c.pids = st.get("pids", [])
        c.extra = st.get("extra", {})
        return c

    def track(self, pid):
        self.pids.append(pid)
        self.save()

    # --- life cycle --------------------------------------------------------------------------------------
    @classmethod
    def create(cls, n_nodes, run_id=None):
        if not 1 <= n_nodes <= 200:
            raise ValueError("node count must be 1..200")
        run_id = run_id or new_run_id()
        free = sorted(set(range(1, 254)) - used_subnets())
        if not free:
            raise RuntimeError("no free 10.213.X.0/24 subnet")
        c = cls(run_id, n_nodes, random.choice(free))
        c.save()  # first, so that a crash half-way still leaves a teardown record
        try:
            c._build()
        except BaseException:
            c.teardown()
            raise
        return c

    def _build(self):
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        # No STP/forward delay: ports forward at once (a 15 s learning phase would eat short runs).
        sh("ip", "link", "set", self.bridge, "type", "bridge", "forward_delay", "0", "stp_state", "0")
        sh("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for k in range(self.n):
            ns = self.ns(k)
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", self.host_veth(k), "type", "veth", "peer", "name", self.veth(k))
            sh("ip", "link", "set", self.veth(k), "netns", ns)
            sh("ip", "link", "set", self.host_veth(k), "master", self.bridge)
            sh("ip", "link", "set", self.host_veth(k), "up")
            # IPv6 off: router/neighbour solicitations would add packets unrelated to the workload.
            for key in ("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"):
                sh("sysctl", "-q", "-w", key, ns=ns, check=False)
            sh("ip", "link", "set", "lo", "up", ns=ns)
            sh("ip", "addr", "add", f"{self.ip(k)}/24", "dev", self.veth(k), ns=ns)
            sh("ip", "link", "set", self.veth(k), "up", ns=ns)
        # Pre-resolve neighbours so that ARP does not delay the first connection of every pair.
        self.wait_reachable()

    def wait_reachable(self, timeout=10.0):
        deadline = time.time() + timeout
        for k in range(self.n):
            target = self.ip((k + 1) % self.n) if self.n > 1 else self.host_ip
            while sh("ping", "-c1", "-W1", "-q", target, ns=self.ns(k), check=False) != 0:
                if time.time() > deadline:
                    raise RuntimeError(f"node n{k} cannot reach {target}")
                time.sleep(0.2)

    def teardown(self):
        """Remove everything of this run; never fails, safe to call twice."""
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for k in range(self.n):
            ns = self.ns(k)
            # Processes still inside the namespace (trainers, SIGSTOPped ranks) would keep it alive.
            out = sh("ip", "netns", "pids", ns, capture=True, check=False) or ""
            for p in out.split():
                try:
                    os.kill(int(p), signal.SIGCONT)
                    os.kill(int(p), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", ns, check=False)
            sh("ip", "link", "del", self.host_veth(k), check=False)
        sh("ip", "link", "del", self.bridge, check=False)
        for ns in self.extra.get("fabric", {}).get("switch_ns", []):  # a leaf-spine run (fabric.py)
            sh("ip", "netns", "del", ns, check=False)
        try:
            os.unlink(self.state_path())
        except FileNotFoundError:
            pass

    # --- helpers -----------------------------------------------------------------------------------------
    def popen(self, k, argv, **kw):
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(k)] + argv, **kw)
        self.track(p.pid)
        return p

    def tx_bytes(self, k):
        """Bytes and packets sent by node k's interface (Ethernet level), from the namespace's sysfs."""
        out = sh("cat", f"/sys/class/net/{self.veth(k)}/statistics/tx_bytes",
                 f"/sys/class/net/{self.veth(k)}/statistics/tx_packets", ns=self.ns(k), capture=True)
        b, p = out.split()
        return int(b), int(p)

    def slow_link(self, k, rate, burst="32kb", latency="50ms"):
        """Token-bucket rate limit on node k's link, both directions: the node's own veth shapes what it sends,
        the bridge-side veth shapes what it receives."""
        sh("tc", "qdisc", "replace", "dev", self.veth(k), "root", "tbf", "rate", rate, "burst", burst,
           "latency", latency, ns=self.ns(k))
        sh("tc", "qdisc", "replace", "dev", self.host_veth(k), "root", "tbf", "rate", rate, "burst", burst,
           "latency", latency)

    def clear_slow_link(self, k):
        sh("tc", "qdisc", "del", "dev", self.veth(k), "root", ns=self.ns(k), check=False)
        sh("tc", "qdisc", "del", "dev", self.host_veth(k), "root", check=False)


RUN_NAME = re.compile(r"^(np[0-9a-f]{5})(br|h\d+|n\d+|l\d+|s\d+)$")


def leftovers(by_name=False):
    """Run ids with a state file on this host: every run writes its state before creating anything and
    removes it last, so a run killed at any point leaves one. by_name adds ids found only by the shape of
    namespace and link names (after /run was cleared): use with care, other tools' names could match."""
    ids = set()
    if os.path.isdir(STATE_DIR):
        ids |= {f[:-5] for f in os.listdir(STATE_DIR) if f.endswith(".json")}
    if by_name:
        names = [l.split()[0] for l in (sh("ip", "netns", "list", capture=True, check=False) or "").splitlines()
                 if l.split()]
        for line in (sh("ip", "-o", "link", "show", capture=True, check=False) or "").splitlines():
            parts = line.split(":")
            if len(parts) > 1:
                names.append(parts[1].strip().split("@")[0])
        for name in names:
            m = RUN_NAME.match(name)
            if m:
                ids.add(m.group(1))
    return sorted(ids)


def teardown_id(run_id):
    try:
        c = Cluster.load(run_id)
    except FileNotFoundError:
        # No state file: reconstruct the names from what exists.
        n = 0
        for line in (sh("ip", "netns", "list", capture=True, check=False) or "").splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(run_id + "n") and name[len(run_id) + 1:].isdigit():
                n = max(n, int(name[len(run_id) + 1:]) + 1)
        for line in (sh("ip", "-o", "link", "show", capture=True, check=False) or "").splitlines():
            parts = line.split(":")
            if len(parts) > 1:
                name = parts[1].strip().split("@")[0]
                if name.startswith(run_id + "h") and name[len(run_id) + 1:].isdigit():
                    n = max(n, int(name[len(run_id) + 1:]) + 1)
        c = Cluster(run_id, n, 0)
    c.teardown()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create a cluster and print its run id")
    up.add_argument("--nodes", type=int, required=True)
    td = sub.add_parser("teardown", help="remove a run's namespaces, links and processes")
    td.add_argument("run_id", nargs="*")
    td.add_argument("--all", action="store_true", help="every leftover testbed run on this host")
    sub.add_parser("list", help="run ids with leftovers on this host")
    st = sub.add_parser("show", help="a run's nodes, namespaces, interfaces and addresses")
    st.add_argument("run_id")
    a = ap.parse_args()
    if a.cmd == "up":
        c = Cluster.create(a.nodes)
        print(c.run_id)
    elif a.cmd == "teardown":
        ids = leftovers() if a.all else a.run_id
        if not ids and not a.all:
            ap.error("teardown needs a run id or --all")
        for i in ids:
            teardown_id(i)
            print(f"removed {i}")
    elif a.cmd == "list":
        for i in leftovers():
            print(i)
    elif a.cmd == "show":
        c = Cluster.load(a.run_id)
        print(f"run {c.run_id} bridge {c.bridge} host {c.host_ip}")
        for k in range(c.n):
            print(f"{c.node(k)} ns={c.ns(k)} iface={c.veth(k)} ip={c.ip(k)} bridge-port={c.host_veth(k)}")


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, ValueError) as e:
        print(f"cluster: {e}", file=sys.stderr)
        sys.exit(1)
