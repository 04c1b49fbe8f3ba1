"""A cluster of soft-RoCE VMs on this machine (issue 16): one qemu VM per RDMA node, emulated (TCG: /dev/kvm
here is a nested KVM that hangs a stock kernel), each with two virtio NICs on two bridges inside a network
namespace this run creates, so no VM packet can leave the machine:
  eth0 -> bridge "rbdata" (10.77.0.0/24): RoCE only; an rxe device on it (vm-init)
  eth1 -> bridge "rbmgmt" (10.78.0.0/24): everything else; the host end of the namespace (10.78.0.1) runs the
          aggregator
VMs are driven through a 9p control share per VM (vm-init runs /ctl/cmd/N.sh, writes /ctl/out/N.*).

Everything a run creates is listed in a state file; teardown() removes it (VMs, aggregator, namespace with
its taps and bridges, the run directory's scratch), also from a detached watchdog when the driver dies.
"""
import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
STATE_DIR = "/run/netprism-rdmabed"
DATA_NET, MGMT_NET = "10.77.0", "10.78.0"
PY = "/usr/bin/python3"


# Builtins only: under emulation every fork+exec costs ~0.5 s on this shared machine (a `cat` per file made a
# snapshot take 7-25 s).
SNAPSHOT = r"""
d=/sys/class/net/eth0/statistics
for f in tx_bytes tx_packets rx_bytes rx_packets; do read -r v <"$d/$f"; echo "if.$f $v"; done
d=/sys/class/net/eth1/statistics
for f in tx_bytes rx_bytes; do read -r v <"$d/$f"; echo "mgmt.$f $v"; done
for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do read -r v <"$f"; echo "hw.${f##*/} $v"; done
"""


def snapshot_delta(before, after):
    """What each counter of two `Cluster.snapshot`s of one VM moved by (counters in both)."""
    return {k: after[k] - before[k] for k in after if k in before}


class Missing(Exception):
    """The machine lacks something the cluster needs: the message names it."""


def sh(*cmd, check=True, **kw):
    return subprocess.run(list(cmd), check=check, text=True, capture_output=True, **kw)


def data_ip(i):
    return f"{DATA_NET}.{10 + i}"


def mac(i, nic):
    return f"52:54:00:7{nic}:00:{10 + i:02x}"


def kill_pid(pid, sig=signal.SIGTERM):
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def teardown_state(st):
    """Removes what a state file lists; safe to run twice and from another process."""
    for pid in st.get("pids", []):
        kill_pid(pid)
    deadline = time.time() + 5
    for pid in st.get("pids", []):
        while time.time() < deadline and kill_pid(pid, 0):
            time.sleep(0.1)
        kill_pid(pid, signal.SIGKILL)
    if st.get("netns"):
        sh("ip", "netns", "del", st["netns"], check=False)
    for p in st.get("scratch", []):
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.exists(p):
            os.unlink(p)
    try:
        os.unlink(os.path.join(STATE_DIR, st["id"] + ".json"))
    except FileNotFoundError:
        pass


def teardown_id(run_id):
    with open(os.path.join(STATE_DIR, run_id + ".json")) as f:
        teardown_state(json.load(f))


def start_watchdog(run_id):
    """Detached (own session, so a kill of our process group spares it): waits for our pid to go, then tears
    the run down if we did not."""
    code = (f"import os,sys,time; sys.path.insert(0,{HERE!r}); import vmcluster as c\n"
            f"pid={os.getpid()}\n"
            "while True:\n"
            "    try: os.kill(pid,0)\n"
            "    except ProcessLookupError: break\n"
            "    time.sleep(0.5)\n"
            f"if os.path.exists(os.path.join(c.STATE_DIR,{run_id!r}+'.json')): c.teardown_id({run_id!r})\n")
    subprocess.Popen([PY, "-c", code], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def check_environment():
    """Names what is missing, before anything is created."""
    if os.geteuid() != 0:
        raise Missing("must run as root (network namespace, taps, debootstrap)")
    for tool, pkg in (("qemu-system-x86_64", "qemu-system-x86"), ("debootstrap", "debootstrap"),
                      ("busybox", "busybox-static"), ("cpio", "cpio"), ("ip", "iproute2")):
        if not shutil.which(tool):
            raise Missing(f"{tool} not found (Debian package {pkg}; scripts/setup installs it)")
    if not os.path.exists("/dev/net/tun"):
        raise Missing("/dev/net/tun missing: qemu cannot make tap devices")


class Cluster:
    def __init__(self, n, build_dir, run_dir, mem_mb=640, smp=1):
        self.n, self.build, self.mem, self.smp = n, os.path.abspath(build_dir), mem_mb, smp
        self.id = f"rb{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.netns = f"nprdma-{self.id}"
        self.run_dir = os.path.abspath(run_dir)
        self.vms = []  # per VM: {"name", "dir", "ctl", "proc"}
        self.state = {"id": self.id, "netns": None, "pids": [], "scratch": []}
        self.agg = None

    # --- state -------------------------------------------------------------------------------------------
    def _save(self):
        os.makedirs(STATE_DIR, exist_ok=True)
        tmp = os.path.join(STATE_DIR, self.id + ".json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.state, f)
        os.replace(tmp, os.path.join(STATE_DIR, self.id + ".json"))

    def teardown(self):
        teardown_state(self.state)

    # --- start -------------------------------------------------------------------------------------------
    def image(self):
        cache = os.path.join(self.build, "rdmabed-cache")
        r = subprocess.run([os.path.join(HERE, "image.sh"), cache], text=True, stdout=subprocess.PIPE)
        if r.returncode != 0:
            raise Missing("could not build the VM image (message above)")
        return r.stdout.strip().splitlines()[-1]

    def start(self, agent_bin=None, boot_timeout=180):
        check_environment()
        boot = self.image()
        os.makedirs(self.run_dir, exist_ok=True)
        self._save()
        start_watchdog(self.id)
        self.state["netns"] = self.netns
        self._save()
        sh("ip", "netns", "add", self.netns)
        ns = ["ip", "netns", "exec", self.netns]
        # No IPv6 anywhere in the namespace: a link-local address would send ND/MLD into the RoCE bridge.
        sh(*ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        for cmd in (["link", "set", "lo", "up"], ["link", "add", "rbdata", "type", "bridge"],
                    ["link", "add", "rbmgmt", "type", "bridge"], ["addr", "add", f"{MGMT_NET}.1/24", "dev", "rbmgmt"],
                    ["link", "set", "rbdata", "up"], ["link", "set", "rbmgmt", "up"]):
            sh("ip", "-n", self.netns, *cmd)
        peers = ";".join(f"{data_ip(i)},{mac(i, 0)}" for i in range(self.n))
        for i in range(self.n):
            self._boot_vm(i, boot, peers, agent_bin)
        self._wait_ready(boot_timeout)

    def _boot_vm(self, i, boot, peers, agent_bin):
        name = f"node{i}"
        vdir = os.path.join(self.run_dir, name)
        ctl = os.path.join(vdir, "ctl")
        os.makedirs(os.path.join(ctl, "cmd"), exist_ok=True)
        if agent_bin:  # the run directory keeps the logs and results; the binary copy goes at teardown
            shutil.copy2(agent_bin, os.path.join(ctl, "netprism-agent"))
            self.state["scratch"].append(os.path.join(ctl, "netprism-agent"))
        for nic, br in ((0, "rbdata"), (1, "rbmgmt")):
            tap = f"t{nic}{i}"
            sh("ip", "-n", self.netns, "tuntap", "add", tap, "mode", "tap")
            # A slow (emulated) receiver stops draining its tap; the default 1000-packet queue then drops
            # bursts of a 64 KiB RDMA message stream (seen here: 15 % of an ib_send_bw run lost).
            sh("ip", "-n", self.netns, "link", "set", tap, "txqueuelen", "20000", "master", br, "up")
        append = (f"console=ttyS0 quiet panic=-1 rdmabed.name={name} rdmabed.data={data_ip(i)}/24 "
                  f"rdmabed.mgmt={MGMT_NET}.{10 + i}/24 rdmabed.peers={peers}")
        root = os.path.realpath(os.path.join(boot, "root"))
        cmd = ["ip", "netns", "exec", self.netns, "qemu-system-x86_64", "-accel", "tcg,thread=multi,tb-size=256",
               "-smp", str(self.smp), "-m", str(self.mem), "-nodefaults", "-no-user-config", "-nographic",
               "-no-reboot", "-serial", f"file:{vdir}/console.log", "-monitor", "none",
               "-kernel", f"{boot}/vmlinuz", "-initrd", f"{boot}/initrd.img", "-append", append,
               "-virtfs", f"local,path={root},mount_tag=root,security_model=none,readonly=on",
               "-virtfs", f"local,path={ctl},mount_tag=ctl,security_model=none"]
        for nic in (0, 1):
            cmd += ["-netdev", f"tap,id=n{nic},ifname=t{nic}{i},script=no,downscript=no",
                    "-device", f"virtio-net-pci,netdev=n{nic},mac={mac(i, nic)},romfile="]
        log = open(os.path.join(vdir, "qemu.log"), "w")
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        self.state["pids"].append(p.pid)
        self._save()
        self.vms.append({"name": name, "dir": vdir, "ctl": ctl, "proc": p})

    def _wait_ready(self, timeout):
        t0 = time.time()
        while True:
            pending = [v for v in self.vms if not os.path.exists(os.path.join(v["ctl"], "out", "ready"))]
            if not pending:
                break
            for v in pending:
                con = self.console(v)
                if v["proc"].poll() is not None or "RDMABED-BOOT-FAILED" in con:
                    raise RuntimeError(f"{v['name']} did not boot; console:\n{con[-3000:]}\nqemu:\n"
                                       + open(os.path.join(v["dir"], "qemu.log")).read()[-2000:])
            if time.time() - t0 > timeout:
                raise RuntimeError(f"{[v['name'] for v in pending]} not up after {timeout} s; console:\n"
                                   + self.console(pending[0])[-3000:])
            time.sleep(0.3)
        self.boot_s = time.time() - t0
        for v in self.vms:
            if "RDMABED-RXE-FAILED" in self.console(v):
                raise RuntimeError(f"{v['name']}: `rdma link add rxe0 type rxe netdev eth0` failed")

    def console(self, v):
        try:
            with open(os.path.join(v["dir"], "console.log"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    # --- commands ----------------------------------------------------------------------------------------
    def submit(self, i, script):
        return submit_to(self.vms[i]["ctl"], "set -e\n" + script + "\n")

    def wait(self, i, n, timeout=300):
        v = self.vms[i]
        out = os.path.join(v["ctl"], "out", f"{n}")
        t0 = time.time()
        while not os.path.exists(out + ".rc"):
            if v["proc"].poll() is not None:
                raise RuntimeError(f"{v['name']} stopped; console:\n{self.console(v)[-2000:]}")
            if time.time() - t0 > timeout:
                raise RuntimeError(f"{v['name']}: command {n} still running after {timeout} s")
            time.sleep(0.1)
        rd = lambda s: open(out + s, errors="replace").read()  # noqa: E731
        return int(rd(".rc")), rd(".out"), rd(".err")

    def run(self, i, script, timeout=300, check=True):
        rc, out, err = self.wait(i, self.submit(i, script), timeout)
        if check and rc != 0:
            raise RuntimeError(f"node{i}: `{script.strip()[:200]}` exited {rc}: {err.strip()[-1500:]}")
        return out

    def spawn(self, i, script, name):
        """Starts script in the background in VM i; its output goes to /ctl/<name>.log, its pid to
        /ctl/<name>.pid."""
        self.run(i, f"setsid bash -c {sh_quote(script)} >/ctl/{name}.log 2>&1 </dev/null & echo $! >/ctl/{name}.pid")

    def snapshot(self, i):
        """eth0's (RoCE only), eth1's (everything else) and rxe0's counters of VM i, as {"if.tx_bytes": ...,
        "mgmt.tx_bytes": ..., "hw.sent_pkts": ...}."""
        out = {}
        for line in self.run(i, SNAPSHOT).splitlines():
            k, v = line.split()
            out[k] = int(v)
        return out

    def wait_agents(self, netprism, n, timeout=120):
        t0 = time.time()
        while time.time() - t0 < timeout:
            try:
                st = json.loads(self.cli(netprism, "status", "--json"))
                if sum(1 for a in st["agents"] if a["connected"]) >= n:
                    return
            except (RuntimeError, ValueError):
                pass
            time.sleep(1)
        raise RuntimeError(f"agents not connected after {timeout} s; see {self.run_dir}/node*/ctl/agent.log")

    def stop_spawned(self, i, name):
        self.run(i, f"p=$(cat /ctl/{name}.pid); kill -TERM $p 2>/dev/null || true; "
                    "for k in $(seq 300); do kill -0 $p 2>/dev/null || exit 0; sleep 0.1; done; exit 1")

    def track(self, pid):
        """A process of this run that teardown() ends."""
        self.state["pids"].append(pid)
        self._save()

    def host_path(self, i, rel):
        return os.path.join(self.vms[i]["ctl"], rel)

    # --- aggregator on the host end of the management bridge ---------------------------------------------
    def start_aggregator(self, binary, port=7470, query_port=7471):
        """Plain TCP (--insecure, and the agents' and CLI's too): both ends live in this run's namespace, which
        nothing outside reaches; CURVE keys would only add files to the run."""
        data = os.path.join(self.run_dir, "aggregator")
        os.makedirs(data, exist_ok=True)
        log = open(os.path.join(self.run_dir, "aggregator.log"), "w")
        p = subprocess.Popen(["ip", "netns", "exec", self.netns, binary, "--insecure", "--listen",
                              f"tcp://{MGMT_NET}.1:{port}",
                              "--query", f"tcp://127.0.0.1:{query_port}", "--data-dir", data],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        self.state["pids"].append(p.pid)
        self._save()
        self.agg = {"proc": p, "endpoint": f"tcp://{MGMT_NET}.1:{port}", "query": f"tcp://127.0.0.1:{query_port}",
                    "data": data}

    def cli(self, netprism, *args):
        r = sh("ip", "netns", "exec", self.netns, netprism, "--insecure", "--aggregator", self.agg["query"], *args,
               check=False)
        if r.returncode != 0:
            raise RuntimeError(f"netprism {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout


def submit_to(ctl, script):
    """Queues a script for a VM's vm-init (it runs /ctl/cmd/0.sh, 1.sh, ... in order) and returns its number.
    Several processes submit to one VM at once (the driver, and OpenMPI's launch agent vm_rsh): the number is
    taken under a lock on the command directory, as the count of the scripts already queued."""
    cmd_dir = os.path.join(ctl, "cmd")
    with open(os.path.join(cmd_dir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        n = len([x for x in os.listdir(cmd_dir) if x.endswith(".sh")])
        path = os.path.join(cmd_dir, f"{n}.sh")
        with open(path + ".tmp", "w") as f:
            f.write(script)
        os.replace(path + ".tmp", path)
    return n


def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    sys.exit("vmcluster.py is a module: use scripts/rdmabed")
