"""scripts/rdmabed: the soft-RoCE testbed (issue 16). Emulated Debian 12 VMs, one per RDMA node, an rxe device
on each VM's eth0, a netprism-agent in every VM, the aggregator on the host end of the namespace's bridge.

  rdmabed image                     build (or find) the cached VM image, print its directory
  rdmabed verbs [--nodes N] [--check] [--out DIR]
                                    ib_write_bw, ib_send_bw and ibv_rc_pingpong between neighbouring nodes; the
                                    probe's RoCE flows, the agent's RDMA samples and QP table compared with the
                                    interface counters, hw_counters, `rdma resource show qp` and the tools' sizes
  rdmabed up [--nodes N] --out DIR  boot the cluster (agents not started) and keep it until DIR/stop exists or
                                    Ctrl-C; the aggregator listens on tcp://10.78.0.1:7470 in the namespace
  rdmabed exec DIR NODE CMD...      run a shell command in VM NODE (0..N-1) of a cluster `up` keeps
  rdmabed run --dp D --pp P [--slow-rank R --slow-ms MS --slow-from I] [--counters-only] --out DIR
                                    the acceptance contract: D x P VMs train (OpenMPI + UCX over the rxe devices,
                                    tests/e2e/train_mpi.py, one rank per VM); netprism's view from the agents'
                                    RoCE flows is scored against the ranks' own log (mpi_run.py). DIR keeps the
                                    recording: truth/, flows.csv, topology.txt, run.json, netprism.json, score.txt
The last line of `verbs` and `run` is one JSON object. Exit: 0 ok, 1 a check failed or the run broke, 2 usage,
3 something missing on this machine (named on stderr; 77 instead when not root and CI is unset).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmcluster as vc  # noqa: E402
import verbs_check as chk  # noqa: E402
import mpi_run  # noqa: E402

# Sizes: small enough that a run stays short under emulation (rxe moves ~10-30 MB/s there), large enough
# that every message spans many MTU-sized packets.
# -u 24: the QP's ACK timeout (4.096 us x 2^24 = 69 s): under emulation an ACK can take longer than the
# default 67 ms (-u 14), and every early timeout resends the window. -t 16: at most 16 messages in flight.
# ibv_rc_pingpong has no such options (timeout 14 is compiled in): its retransmissions are accounted from
# the receiver's hw_counters (verbs_check.py).
WORKLOADS = [
    # name, command (the client gets the server's management address appended), size, iters
    ("write_bw", "ib_write_bw -d rxe0 -x 1 -F -u 24 -t 16 -s {size} -n {iters}", 65536, 100),
    ("send_bw", "ib_send_bw -d rxe0 -x 1 -F -u 24 -t 16 -s {size} -n {iters}", 65536, 100),
    ("pingpong", "ibv_rc_pingpong -d rxe0 -g 1 -s {size} -n {iters}", 4096, 400),
]
# pingpong's 400 round trips keep its QPs connected ~1-2 s under emulation: with 50 (well under a second)
# the `rdma resource show qp` watcher (a snapshot every 0.5 s plus its own start-up) caught the server's QP
# only in INIT in 2 of 2 runs (2026-11-30), and the tool's QP pair went unchecked.
# The QP table is refreshed every 5 s by default (QPs of jobs live for hours); the tools' QPs here live for a
# few seconds (>= 5 s here), so the test refreshes it more often than the `rdma` watcher samples (0.5 s).
AGENT_TOML = "[rdma]\nqp_refresh_ms = 200\n"
def run_workload(c, a, b, wl):
    """One tool run, client on a, server on b; the hw_counters of both around it (for retransmissions)."""
    hw_before = {x: c.snapshot(x) for x in (a, b)}
    name, cmd, size, iters = wl
    tool = cmd.format(size=size, iters=iters)
    tag = f"{name}_{a}_{b}"
    c.spawn(b, f"exec {tool}", tag + "_server")
    c.run(b, "for i in $(seq 300); do ss -Hltn 'sport = :18515' | grep -q . && exit 0; sleep 0.1; done; exit 1")
    t0 = time.time()
    client = c.run(a, f"{tool} {vc.MGMT_NET}.{10 + b}", timeout=300)
    c.run(b, f"p=$(cat /ctl/{tag}_server.pid); for i in $(seq 600); do kill -0 $p 2>/dev/null || exit 0; "
             "sleep 0.1; done; exit 1")
    with open(c.host_path(a, f"{tag}_client.log"), "w") as f:
        f.write(client)
    seconds = time.time() - t0
    time.sleep(0.5)  # hw_counters are cached for `lifespan` ms
    hw = {f"node{x}": {k: v - hw_before[x][k] for k, v in c.snapshot(x).items()} for x in (a, b)}
    return {"name": name, "client": a, "server": b, "size": size, "iters": iters, "seconds": seconds, "hw": hw}


def verbs_scenario(a, n):
    build = os.path.abspath(a.build)
    bins = {k: os.path.join(build, p) for k, p in (
        ("agent", "agent/netprism-agent"), ("aggregator", "aggregator/netprism-aggregator"),
        ("netprism", "aggregator/netprism"), ("dump", "tests/rdma/np_rdma_dump"))}
    for k, p in bins.items():
        if not os.access(p, os.X_OK):
            raise vc.Missing(f"{p} not built (cmake --build {build} --target netprism-agent netprism-aggregator "
                             "netprism np_rdma_dump)")
    out = os.path.abspath(a.out or tempfile.mkdtemp(prefix="rdmabed-"))
    t_start = time.time()
    c = vc.Cluster(n, build, out)
    ok = False
    try:
        c.start(agent_bin=bins["agent"])
        boot_s = c.boot_s
        c.start_aggregator(bins["aggregator"])
        for i in range(n):
            with open(c.host_path(i, "agent.toml"), "w") as f:
                f.write(AGENT_TOML)
            c.spawn(i, f"exec /ctl/netprism-agent --insecure --aggregator {c.agg['endpoint']} --node node{i} --iface eth0 "
                       "--spool-dir /tmp/spool --config /ctl/agent.toml", "agent")
            c.spawn(i, "while :; do rdma -j resource show qp; sleep 0.5; done", "qpwatch")
        c.wait_agents(bins["netprism"], n)
        mtu = int(c.run(0, "ibv_devinfo -d rxe0 | awk '/active_mtu/ {print $2}'").split()[0])
        before = [c.snapshot(i) for i in range(n)]
        pairs = [(i, (i + 1) % n) for i in range(n if n > 2 else 1)]
        runs = [run_workload(c, x, y, wl) for x, y in pairs for wl in WORKLOADS]
        time.sleep(1)  # rxe's hw_counters are cached for their `lifespan` (ms): read them settled
        after = [c.snapshot(i) for i in range(n)]
        qp_rows = []
        for i in range(n):
            c.stop_spawned(i, "qpwatch")
            c.stop_spawned(i, "agent")
            qp_rows += chk.parse_qp_watch(f"node{i}", open(c.host_path(i, "qpwatch.log")).read())
        time.sleep(2)  # the aggregator acknowledges the agents' last batches before it is asked
        flows = json.loads(c.cli(bins["netprism"], "flows", "--json"))["flows"]
        dump = json.loads(subprocess.run([bins["dump"], c.agg["data"]], check=True, text=True,
                                         capture_output=True).stdout)
        res = chk.check(n=n, mtu=mtu, runs=runs, before=before, after=after, flows=flows, dump=dump,
                        qp_rows=qp_rows)
        res.update(boot_s=round(boot_s, 1), wall_s=round(time.time() - t_start, 1), out=out, mtu=mtu)
        with open(os.path.join(out, "verbs_result.json"), "w") as f:
            json.dump({"result": res, "flows": flows, "qp_rows": qp_rows, "before": before, "after": after,
                       "runs": runs, "dump": dump}, f, indent=1)
        ok = res["ok"]
        return res
    finally:
        c.teardown()
        if a.out is None and ok:  # a temporary run that passed: nothing worth keeping
            shutil.rmtree(out, ignore_errors=True)
        elif not ok:
            print(f"rdmabed: logs and results kept in {out}", file=sys.stderr)


def up(a):
    c = vc.Cluster(a.nodes, a.build, a.out)
    try:
        c.start(agent_bin=os.path.join(os.path.abspath(a.build), "agent/netprism-agent"))
        c.start_aggregator(os.path.join(os.path.abspath(a.build), "aggregator/netprism-aggregator"))
        with open(os.path.join(c.run_dir, "cluster.json"), "w") as f:
            json.dump({"netns": c.netns, "vms": [v["ctl"] for v in c.vms]}, f)
        print(f"rdmabed: {a.nodes} VMs up in {c.boot_s:.1f} s (netns {c.netns}); "
              f"`scripts/rdmabed exec {c.run_dir} 0 CMD`; stop: touch {c.run_dir}/stop", file=sys.stderr)
        while not os.path.exists(os.path.join(c.run_dir, "stop")):
            if any(v["proc"].poll() is not None for v in c.vms):
                raise RuntimeError("a VM stopped")
            time.sleep(0.5)
        return 0
    finally:
        c.teardown()


def exec_in(a):
    with open(os.path.join(a.dir, "cluster.json")) as f:
        ctl = json.load(f)["vms"][a.node]
    n = vc.submit_to(ctl, " ".join(a.command) + "\n")
    rc_path = os.path.join(ctl, "out", f"{n}.rc")
    while not os.path.exists(rc_path):
        time.sleep(0.1)
    sys.stdout.write(open(os.path.join(ctl, "out", f"{n}.out")).read())
    sys.stderr.write(open(os.path.join(ctl, "out", f"{n}.err")).read())
    return int(open(rc_path).read())


def main():
    p = argparse.ArgumentParser(prog="rdmabed", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(vc.REPO, "build"), help="CMake build directory")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("image")
    v = sub.add_parser("verbs")
    v.add_argument("--nodes", type=int, default=2)
    v.add_argument("--check", action="store_true", help="exit 1 when any check fails")
    v.add_argument("--out")
    v.add_argument("--build", default=argparse.SUPPRESS)
    u = sub.add_parser("up")
    u.add_argument("--nodes", type=int, default=2)
    u.add_argument("--out", required=True)
    u.add_argument("--build", default=argparse.SUPPRESS)
    e = sub.add_parser("exec")
    e.add_argument("dir")
    e.add_argument("node", type=int)
    e.add_argument("command", nargs=argparse.REMAINDER)
    r = sub.add_parser("run")
    r.add_argument("--dp", type=int, required=True)
    r.add_argument("--pp", type=int, required=True)
    r.add_argument("--slow-rank", type=int)
    r.add_argument("--slow-ms", type=float)
    r.add_argument("--slow-from", type=int, default=0)
    r.add_argument("--counters-only", action="store_true",
                   help="issue 16 item 4: the probe off the RDMA traffic, analysis from port counters + QP tables")
    r.add_argument("--timeout", type=float, default=900, help="give up training after this many seconds")
    r.add_argument("--ucx", action="append", metavar="K=V",
                   help="another UCX setting for the ranks, e.g. UCX_RNDV_THRESH=inf (repeatable)")
    r.add_argument("--out", required=True)
    r.add_argument("--build", default=argparse.SUPPRESS)
    a = p.parse_args()
    # SIGINT set explicitly: a job started in the background by a non-interactive shell starts with it ignored.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(f"rdmabed: signal {s}"))
    try:
        if a.cmd == "image":
            c = vc.Cluster(0, a.build, tempfile.gettempdir())
            vc.check_environment()
            print(c.image())
            return 0
        if a.cmd == "up":
            return up(a)
        if a.cmd == "exec":
            return exec_in(a)
        if a.cmd == "verbs":
            res = verbs_scenario(a, a.nodes)
            print(json.dumps(res))
            return 1 if a.check and not res["ok"] else 0
        return run_contract(a)
    except vc.Missing as e:
        print(f"rdmabed: cannot start: {e}", file=sys.stderr)
        return 77 if os.geteuid() != 0 and not os.environ.get("CI") else 3
    except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
        print(f"rdmabed: {e}", file=sys.stderr)
        return 1


def run_contract(a):
    n = a.dp * a.pp
    if n < 2 or min(a.dp, a.pp) < 1:
        print("rdmabed: --dp x --pp must be at least 2 (one VM per node)", file=sys.stderr)
        return 2
    if (a.slow_rank is None) != (a.slow_ms is None) or (a.slow_rank is not None and not 0 <= a.slow_rank < n):
        print(f"rdmabed: --slow-rank (0..{n - 1}) and --slow-ms go together", file=sys.stderr)
        return 2
    build = os.path.abspath(a.build)
    bins = {k: os.path.join(build, p) for k, p in (
        ("agent", "agent/netprism-agent"), ("aggregator", "aggregator/netprism-aggregator"),
        ("netprism", "aggregator/netprism"), ("flow_csv", "tests/rdma/np_flow_csv"))}
    for k, p in bins.items():
        if not os.access(p, os.X_OK):
            raise vc.Missing(f"{p} not built (cmake --build {build} --target netprism-agent netprism-aggregator "
                             "netprism np_flow_csv)")
    try:
        res = mpi_run.run(a, bins)
    except NotImplementedError as e:
        print(f"rdmabed: {e}", file=sys.stderr)
        return 2
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
