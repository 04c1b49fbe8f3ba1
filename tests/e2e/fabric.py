#!/usr/bin/python3
"""Leaf-spine fabric for the namespace testbed: namespaces acting as routers instead of one bridge.

  L leaves, S spines (default 2): every leaf has one link to every spine; node k hangs under leaf k % L, so
  consecutive nodes of a job land on different leaves and two jobs of the same shape share every leaf.
  Leaves route with Linux multipath (ECMP) routes over their uplinks; the kernel hashes each packet's
  (source, destination) address pair (fib_multipath_hash_policy 0, the default: L3), so all traffic of a node
  pair takes one spine, fixed for the run, but which one depends on a per-boot random hash seed.

The testbed measures the path every node pair takes on the switches (pings and the leaf's uplink packet
counters, see spine_of), and writes it into the topology file as `path` lines, beside the switch and link
lines (docs/formats.md): per-switch telemetry an operator has in some form (port counters, sampled flows at
the switch, a traceroute); without it the spine a pair took is unknown from host data.

Names (IFNAMSIZ 15): switch namespaces <id>l<i> (leaf i), <id>s<j> (spine j); node k's veth <id>v<k> inside
its namespace, <id>h<k> inside its leaf; leaf-spine veth <id>u<i>s<j> (leaf side), <id>d<j>l<i> (spine side).
Addresses: nodes 10.213.X.(k+1)/32 as on the bridge; switches 10.213.Y.(i+1) (leaf i, on all its ports) and
10.213.Y.(101+j) (spine j), Y another free /24. Faults: see FAULTS.
"""
import random
import time

import cluster as cl
from cluster import sh

FAULT_KEYS = {"fabriclink": {"leaf", "spine", "rate", "from", "burst"},
              "leafuplinks": {"leaf", "rate", "from", "burst"}}


class FabricCluster(cl.Cluster):
    def __init__(self, run_id, n_nodes, octet, leaves=2, spines=2, infra=0):
        super().__init__(run_id, n_nodes, octet)
        self.leaves, self.spines, self.infra = leaves, spines, infra
        self._paths = {}  # (a, b) -> spine index, measured once (spine_of)
        self.extra["fabric"] = {"leaves": leaves, "spines": spines, "infra": infra,
                                "switch_ns": [self.leaf_ns(i) for i in range(leaves)] +
                                [self.spine_ns(j) for j in range(spines)]}

    def leaf_of(self, k):
        return k % self.leaves

    def leaf_ns(self, i):
        return f"{self.run_id}l{i}"

    def spine_ns(self, j):
        return f"{self.run_id}s{j}"

    def up(self, i, j):
        return f"{self.run_id}u{i}s{j}"

    def down(self, j, i):
        return f"{self.run_id}d{j}l{i}"

    def leaf_ip(self, i):
        return f"{cl.SUBNET_BASE}.{self.infra}.{i + 1}"

    def spine_ip(self, j):
        return f"{cl.SUBNET_BASE}.{self.infra}.{101 + j}"

    @classmethod
    def create_fabric(cls, n_nodes, leaves, spines=2, run_id=None):
        if not (2 <= leaves <= 16 and 1 <= spines <= 4 and 1 <= n_nodes <= 64):
            raise ValueError("fabric: 2..16 leaves, 1..4 spines, 1..64 nodes")
        run_id = run_id or cl.new_run_id()
        free = sorted(set(range(1, 254)) - cl.used_subnets())
        if len(free) < 2:
            raise RuntimeError("no two free 10.213.X.0/24 subnets")
        octet, infra = random.sample(free, 2)
        c = cls(run_id, n_nodes, octet, leaves, spines, infra)
        c.save()  # first, so that a crash half-way still leaves a teardown record
        try:
            c._build_fabric()
        except BaseException:
            c.teardown()
            raise
        return c

    def _router(self, ns):
        sh("ip", "netns", "add", ns)
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
                    "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
                    "net.ipv4.fib_multipath_hash_policy=0"):
            sh("sysctl", "-q", "-w", key, ns=ns, check=False)
        sh("ip", "link", "set", "lo", "up", ns=ns)

    def _veth(self, a, ns_a, b, ns_b):
        sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        sh("ip", "link", "set", a, "netns", ns_a)
        sh("ip", "link", "set", b, "netns", ns_b)

    def _build_fabric(self):
        for i in range(self.leaves):
            self._router(self.leaf_ns(i))
        for j in range(self.spines):
            self._router(self.spine_ns(j))
        for i in range(self.leaves):  # leaf-spine links: /32 addresses, a device route to the peer
            for j in range(self.spines):
                li, sj = self.leaf_ns(i), self.spine_ns(j)
                self._veth(self.up(i, j), li, self.down(j, i), sj)
                sh("ip", "addr", "add", f"{self.leaf_ip(i)}/32", "dev", self.up(i, j), ns=li)
                sh("ip", "addr", "add", f"{self.spine_ip(j)}/32", "dev", self.down(j, i), ns=sj)
                sh("ip", "link", "set", self.up(i, j), "up", ns=li)
                sh("ip", "link", "set", self.down(j, i), "up", ns=sj)
                sh("ip", "route", "add", f"{self.spine_ip(j)}/32", "dev", self.up(i, j), ns=li)
                sh("ip", "route", "add", f"{self.leaf_ip(i)}/32", "dev", self.down(j, i), ns=sj)
        for k in range(self.n):
            ns, li = self.ns(k), self.leaf_ns(self.leaf_of(k))
            sh("ip", "netns", "add", ns)
            self._veth(self.veth(k), ns, self.host_veth(k), li)
            for key in ("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"):
                sh("sysctl", "-q", "-w", key, ns=ns, check=False)
            sh("ip", "link", "set", "lo", "up", ns=ns)
            sh("ip", "addr", "add", f"{self.ip(k)}/32", "dev", self.veth(k), ns=ns)
            sh("ip", "link", "set", self.veth(k), "up", ns=ns)
            gw = self.leaf_ip(self.leaf_of(k))
            sh("ip", "route", "add", f"{gw}/32", "dev", self.veth(k), ns=ns)
            sh("ip", "route", "add", "default", "via", gw, "dev", self.veth(k), ns=ns)
            sh("ip", "addr", "add", f"{gw}/32", "dev", self.host_veth(k), ns=li)
            sh("ip", "link", "set", self.host_veth(k), "up", ns=li)
            sh("ip", "route", "add", f"{self.ip(k)}/32", "dev", self.host_veth(k), ns=li)
            for j in range(self.spines):  # spines: each node behind its leaf
                sh("ip", "route", "add", f"{self.ip(k)}/32", "via", gw, "dev", self.down(j, self.leaf_of(k)),
                   ns=self.spine_ns(j))
        subnet = f"{cl.SUBNET_BASE}.{self.octet}.0/24"
        for i in range(self.leaves):  # remote nodes: ECMP over every spine
            hops = []
            for j in range(self.spines):
                hops += ["nexthop", "via", self.spine_ip(j), "dev", self.up(i, j)]
            sh("ip", "route", "add", subnet, *hops, ns=self.leaf_ns(i))
        self.wait_reachable()

    # --- shaping: tc tbf on both ends of a link --------------------------------------------------------
    def _shape(self, dev, ns, rate, burst="32kb", latency="50ms"):
        sh("tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", burst, "latency", latency,
           ns=ns)

    def slow_link(self, k, rate, burst="32kb", latency="50ms"):
        self._shape(self.veth(k), self.ns(k), rate, burst, latency)
        self._shape(self.host_veth(k), self.leaf_ns(self.leaf_of(k)), rate, burst, latency)

    def clear_slow_link(self, k):
        sh("tc", "qdisc", "del", "dev", self.veth(k), "root", ns=self.ns(k), check=False)
        sh("tc", "qdisc", "del", "dev", self.host_veth(k), "root", ns=self.leaf_ns(self.leaf_of(k)), check=False)

    def shape_uplink(self, i, j, rate, burst="32kb"):
        self._shape(self.up(i, j), self.leaf_ns(i), rate, burst)
        self._shape(self.down(j, i), self.spine_ns(j), rate, burst)

    def shape_all(self, rate):
        """Every link at a line rate: host links and leaf-spine links alike (1:1, non-blocking for 2 nodes
        per leaf and 2 spines)."""
        for k in range(self.n):
            self.slow_link(k, rate)
        for i in range(self.leaves):
            for j in range(self.spines):
                self.shape_uplink(i, j, rate)

    def usage(self, jobs):
        """Per (leaf, spine) link: the (job, src, dst) pairs whose traffic crosses it, counting each job's
        neighbouring nodes (DP ring and pipeline neighbours) both ways."""
        use = {(i, j): set() for i in range(self.leaves) for j in range(self.spines)}
        for job in jobs:
            ks = [int(n[1:]) for n in job["nodes"]]
            for a, b in zip(ks, ks[1:] + ks[:1]):
                for x, y in {(a, b), (b, a)}:
                    if x != y and self.leaf_of(x) != self.leaf_of(y):
                        j = self.spine_of(x, y)
                        for i in (self.leaf_of(x), self.leaf_of(y)):
                            use[(i, j)].add((job["name"], x, y))
        return use

    def choose(self, f, jobs):
        """leaf=auto / spine=auto: a link or leaf that the jobs' traffic can single out. fabriclink: a link no
        other link carries exactly the same pairs as (such twins, e.g. both links of the one route two
        leaves' pairs take, no traffic data tells apart: the analysis names them together), crossed by the
        most jobs, on a leaf whose other uplinks carry traffic too (else the link and the whole leaf look
        alike); leafuplinks: a leaf whose traffic crosses every spine, of the most jobs."""
        use = self.usage(jobs)
        leaves = range(self.leaves) if f["leaf"] == "auto" else [int(f["leaf"][4:])]
        spines = range(self.spines) if f.get("spine", "auto") == "auto" else [int(f["spine"][5:])]

        def score(i, j):
            all_used = sum(1 for s in range(self.spines) if use[(i, s)])
            users = {p[0] for s in range(self.spines) for p in use[(i, s)]}
            if f["kind"] == "fabriclink":
                unique = all(use[k] != use[(i, j)] for k in use if k != (i, j))
                return (unique, len({p[0] for p in use[(i, j)]}), all_used, len(use[(i, j)]))
            return (all_used, len(users), sum(len(use[(i, s)]) for s in range(self.spines)))
        cands = [(i, j) for i in leaves for j in spines]
        random.shuffle(cands)  # ties: any of them, so that runs cover different leaves and spines
        best = max(cands, key=lambda ij: score(*ij))
        f["leaf"] = f"leaf{best[0]}"
        if f["kind"] == "fabriclink":
            f["spine"] = f"spine{best[1]}"
        f["crossing"] = {f"leaf{i}<->spine{j}": sorted({p[0] for p in use[(i, j)]}) for (i, j) in use}

    def apply_fault(self, f):
        i = int(f["leaf"].removeprefix("leaf"))
        spines = [int(f["spine"].removeprefix("spine"))] if f["kind"] == "fabriclink" else range(self.spines)
        for j in spines:
            self.shape_uplink(i, j, f["rate"], f.get("burst", "32kb"))
        f["applied_at"] = time.time()

    # --- what the switches know --------------------------------------------------------------------------
    def spine_of(self, a, b):
        """The spine traffic from node a to node b crosses, measured on the switch: 20 pings a -> b, and the
        uplink of a's leaf whose packet counter rose by as many. Asking the leaf's FIB (`ip route get DST from
        SRC iif PORT`, which runs the multipath selection on a synthetic packet) disagreed with the traffic
        the uplinks' counters then carried (kernel 6.x here: 2 of 8 ring pairs), so the paths are measured
        with real packets of the same address pair (policy 0 hashes addresses only: an echo request takes the
        path of the pair's TCP traffic). Before any job runs, so nothing else moves the counters."""
        if (a, b) in self._paths:
            return self._paths[(a, b)]
        li, n = self.leaf_of(a), 20
        files = [f"/sys/class/net/{self.up(li, j)}/statistics/tx_packets" for j in range(self.spines)]
        before = [int(x) for x in sh("cat", *files, ns=self.leaf_ns(li), capture=True).split()]
        sh("ping", "-c", str(n), "-i", "0.002", "-q", "-W", "1", self.ip(b), ns=self.ns(a))
        after = [int(x) for x in sh("cat", *files, ns=self.leaf_ns(li), capture=True).split()]
        rose = [j for j in range(self.spines) if after[j] - before[j] >= n]
        if len(rose) != 1:
            raise RuntimeError(f"fabric: n{a} -> n{b}: {n} pings moved uplinks {rose} of leaf{li}")
        self._paths[(a, b)] = rose[0]
        return rose[0]

    def topology(self):
        lines = [f"{self.ip(k)} {self.node(k)}" for k in range(self.n)]
        lines += [f"switch leaf{i} leaf" for i in range(self.leaves)]
        lines += [f"switch spine{j} spine" for j in range(self.spines)]
        lines += [f"link {self.node(k)} leaf{self.leaf_of(k)}" for k in range(self.n)]
        lines += [f"link leaf{i} spine{j}" for i in range(self.leaves) for j in range(self.spines)]
        for a in range(self.n):
            for b in range(self.n):
                la, lb = self.leaf_of(a), self.leaf_of(b)
                if a != b and la != lb:
                    lines.append(f"path {self.node(a)} {self.node(b)} leaf{la} spine{self.spine_of(a, b)} leaf{lb}")
        return "\n".join(lines) + "\n"

    def uplink_bytes(self):
        """Bytes sent by each leaf-spine link end (leaf side up, spine side down): per-switch counters that
        check the recorded paths (traffic should cross only the spines the path lines name)."""
        out = {}
        for i in range(self.leaves):
            for j in range(self.spines):
                for dev, ns, name in ((self.up(i, j), self.leaf_ns(i), f"leaf{i}->spine{j}"),
                                      (self.down(j, i), self.spine_ns(j), f"spine{j}->leaf{i}")):
                    out[name] = int(sh("cat", f"/sys/class/net/{dev}/statistics/tx_bytes", ns=ns,
                                       capture=True).strip())
        return out


def parse_fault(kind, kv, f):
    """Fills fault f (kind fabriclink | leafuplinks) from its key=value pairs."""
    extra = set(kv) - FAULT_KEYS[kind]
    if extra:
        raise ValueError(f"fault {kind}: unknown keys {sorted(extra)}")
    if "leaf" not in kv or (kind == "fabriclink" and "spine" not in kv):
        raise ValueError(f"fault {kind}: needs leaf=leafI" + (" and spine=spineJ" if kind == "fabriclink" else "")
                         + " (or auto)")
    for key in ("leaf", "spine"):
        if key in kv:
            if not (kv[key].startswith(key) and kv[key][len(key):].isdigit()) and kv[key] != "auto":
                raise ValueError(f"fault {kind}: {key} must look like {key}0")
            f[key] = kv[key]
    f["rate"] = kv.get("rate", "200mbit")
    f["burst"] = kv.get("burst", "32kb")
    f["from"] = int(kv.get("from", 0))
    return f
