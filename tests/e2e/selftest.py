#!/usr/bin/python3
"""Self-test of the testbed (CTest e2e_testbed_selftest). Needs root.

1. A cluster comes up, its nodes reach each other, and teardown leaves no namespace, link or state file.
2. A driver killed with SIGKILL right after creating its cluster is cleaned up by its watchdog.
3. A short DP2 x PP2 run writes a consistent truth log (every rank, every iteration, ordered instants, the
   Megatron layout) and a flow CSV whose per-node byte totals equal the interface's own transmit counters.
4. The scorer scores the truth against itself with zero error and no structural mismatch.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster as cl  # noqa: E402
import score  # noqa: E402

PY = "/usr/bin/python3"
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def names_of(run_id):
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [l for l in (netns + links).splitlines() if run_id in l]


def test_cluster():
    c = cl.Cluster.create(3)
    try:
        check(len(names_of(c.run_id)) >= 4, f"cluster {c.run_id}: 3 namespaces and a bridge exist")
        r = subprocess.run(["ip", "netns", "exec", c.ns(0), "ping", "-c1", "-W2", c.ip(2)], capture_output=True)
        check(r.returncode == 0, "n0 reaches n2 across the bridge")
    finally:
        c.teardown()
    check(names_of(c.run_id) == [], "teardown leaves no namespace or link")
    check(not os.path.exists(c.state_path()), "teardown removes the state file")


def test_killed_driver(tmp):
    out = os.path.join(tmp, "killed")
    p = subprocess.Popen([PY, os.path.join(HERE, "testbed.py"), "run", "--dp", "2", "--pp", "1", "--iters", "50",
                          "--out", out], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()  # "testbed: run npXXXXX: ..." once the cluster exists
    run_id = line.split()[2].rstrip(":") if line.startswith("testbed: run ") else None
    check(run_id is not None, f"driver reported its run id ({line.strip()!r})")
    time.sleep(3)  # let the trainers start
    p.kill()
    p.wait()
    deadline = time.time() + 30
    while run_id and names_of(run_id) and time.time() < deadline:
        time.sleep(0.5)
    check(run_id is not None and names_of(run_id) == [], "a SIGKILLed driver's cluster is removed by its watchdog")


def test_run(tmp):
    out = os.path.join(tmp, "run")
    t0 = time.time()
    r = subprocess.run([PY, os.path.join(HERE, "testbed.py"), "run", "--dp", "2", "--pp", "2", "--iters", "6",
                        "--out", out])
    check(r.returncode == 0, f"DP2xPP2 run succeeded ({time.time() - t0:.1f} s)")
    if r.returncode:
        return
    m = json.load(open(os.path.join(out, "run.json")))
    check(names_of(m["run_id"]) == [], "the run tore its cluster down")
    # Truth.
    recs = []
    for fn in sorted(os.listdir(os.path.join(out, "truth", "job0"))):
        recs += [json.loads(l) for l in open(os.path.join(out, "truth", "job0", fn))]
    its = [x for x in recs if x["type"] == "iter"]
    check(len(its) == 4 * 6, f"4 ranks x 6 iterations logged ({len(its)})")
    check(sum(x["type"] == "end" for x in recs) == 4, "every rank logged its end")
    check(all(x["start"] <= x["compute_end"] <= x["sync_end"] <= x["step_end"] for x in its),
          "start <= compute_end <= sync_end <= step_end")
    ok = True
    for x in its:
        r_ = x["rank"]
        ok &= (x["stage"], x["dp_rank"], x["tp_rank"]) == (r_ // 2, r_ % 2, 0) and x["node"] == f"n{r_}"
    check(ok, "Megatron layout: rank = stage*dp*tp + dp_rank*tp + tp_rank, node = rank // tp")
    by_rank = {}
    for x in its:
        by_rank.setdefault(x["rank"], []).append(x)
    check(all(all(a["sync_end"] < b["start"] + 1e-3 for a, b in zip(v, v[1:])) for v in by_rank.values()),
          "iterations of a rank do not overlap")
    # Capture vs interface counters.
    rows = list(csv.DictReader(open(os.path.join(out, "flows.csv"))))
    check(len(rows) > 0 and list(rows[0].keys()) == ["src_ip", "dst_ip", "src_port", "dst_port", "bytes", "start_ns",
                                                     "end_ns", "proto", "packets", "node", "tcp_flags"], "flow CSV header")
    ip_node = dict(l.split() for l in open(os.path.join(out, "topology.txt")))
    check(all(ip_node.get(r_["src_ip"]) == r_["node"] for r_ in rows), "every row observed by its sender's node")
    check(all(int(r_["start_ns"]) <= int(r_["end_ns"]) for r_ in rows), "start_ns <= end_ns")
    fins = {(r_["src_ip"], r_["src_port"], r_["dst_ip"], r_["dst_port"]) for r_ in rows if int(r_["tcp_flags"]) & 1}
    conns = {(r_["src_ip"], r_["src_port"], r_["dst_ip"], r_["dst_port"]) for r_ in rows if int(r_["bytes"]) > 1000}
    check(conns and conns <= fins, f"a normal end closes every data-carrying connection direction (FIN seen on "
                                   f"{len(conns & fins)}/{len(conns)})")
    for node, st in sorted(m["capture"].items()):
        csv_b = sum(int(r_["bytes"]) for r_ in rows if r_["node"] == node)
        csv_p = sum(int(r_["packets"]) for r_ in rows if r_["node"] == node)
        total = csv_b + st["link_bytes_of_ip"] + st["other_bytes"]
        check("0 packets dropped" in st["tcpdump"], f"{node}: tcpdump dropped nothing")
        # Exact when nothing was sent while the capture stopped; else between the counters before and after.
        at_stop = st.get("iface_tx_bytes_at_stop", st["iface_tx_bytes"])
        check(csv_p == st["ip_packets"] and at_stop <= total <= st["iface_tx_bytes"],
              f"{node}: CSV bytes {csv_b} + link headers {st['link_bytes_of_ip']} + non-IP {st['other_bytes']} "
              f"= {total}, interface tx_bytes {at_stop} when the capture stopped, {st['iface_tx_bytes']} after")
    # Scorer on the truth itself.
    truth_doc = os.path.join(out, "self.json")
    rc = score.main([out, "--self", "--strict", "--max-median-err", "0.001", "--max-p95-err", "0.001",
                     "--max-missing", "0", "--max-extra", "0", "--out-json", truth_doc])
    res = json.load(open(truth_doc))
    check(rc == 0 and res["structural_ok"] and res["jobs"][0]["matched"] == 5,
          "scorer: truth vs itself matches 5 iterations with zero error")


def main():
    if os.geteuid() != 0:
        print("selftest: needs root (namespaces, tc, tcpdump)", file=sys.stderr)
        return 77 if os.environ.get("CI") != "true" else 1
    with tempfile.TemporaryDirectory(prefix="np-selftest-") as tmp:
        test_cluster()
        test_killed_driver(tmp)
        test_run(tmp)
    print(f"\n{len(failures)} failure(s)" + (": " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
