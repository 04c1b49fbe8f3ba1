#!/usr/bin/env python3
"""What a counters-only netprism agent would have shipped during a recorded testbed run.

Input: a recording of tests/e2e/samples/ (flows.csv.gz: every packet's flowlet at its sender, topology.txt).
Output: an RDMA counters recording (`netprism analyze --format rdma-counters`, docs/formats.md) of the same run,
as if the training traffic had gone over hardware RoCE NICs that the probe cannot see. The transform,
documented because the tests' claims rest on it:

- Training connections become RDMA: every TCP row that is not the rendezvous (bootstrap) connection is taken
  out of the flows and put on per-node port counters instead. The rendezvous connection (the one the first SYN
  of the recording opens: gloo's TCPStore / the launcher) stays a TCP flow, as the probe still sees the
  kernel's TCP on the NIC's netdev.
- Port byte counters: each row's IP bytes, spread uniformly over its [start_ns, end_ns] (a single-packet row at
  its time), are counted on the sender's port as transmitted and on the receiver's port as received, at the
  same instants (wire latency in the testbed is microseconds). Every byte counts, acknowledgements included
  (a port counter cannot tell them apart).
- Sampling: each node's counters are read every 10 ms (--sample-ms) at its own phase (a fixed pseudo-random
  offset per node: agents are not synchronised), and every sampling interval with activity becomes one
  RdmaPortBurst [previous reading, this reading] with the interval's deltas -- what the agent's counters-only
  mode ships (agent/rdma: the burst's maximum duration is one sampling interval).
- QP table: one RC QP on each side of every node pair whose connections carried more than set-up traffic
  (MIN_PAIR_BYTES: gloo opens a full mesh and uses its ring's pairs; UCX connects on first use); 24-bit QPNs
  spread over the range as a ConnectX NIC's firmware hands them out (qp_number); no addresses (UCX's RC transport does not use rdma_cm, so the CM
  table gives none). Each node's table is read at every counter sampling instant (the counters-only mode
  reads both together), with each QP's PSNs (sq_psn: the next PSN it sends, advanced by one per data packet
  it sent; rq_psn likewise for what it received; initial PSNs pseudo-random as verbs applications pick them;
  acknowledgement-only packets advance neither). A pair's QPs are listed from its first talk until its TCP
  connections were closed (FIN/RST in the recording), or to the end when they were not (a hung job keeps its
  QPs); one more read after the run shows the closed pairs' QPs gone.
"""
import argparse
import collections
import gzip
import csv
import hashlib
import json
import sys

ROCE_MTU = 4096
# A node pair gets QPs when its connection carried more than connection set-up: gloo opens a full mesh of
# connections (a few KB each) and uses only its ring's; a verbs transport connecting on first use (UCX) has
# QPs for the pairs that communicate only.
MIN_PAIR_BYTES = 64 * 1024


def load(sample):
    nodes = {}
    with open(f"{sample}/topology.txt") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                nodes[parts[0]] = parts[1]
    with gzip.open(f"{sample}/flows.csv.gz", "rt") as f:
        rows = list(csv.DictReader(f))
    return nodes, rows


def bootstrap_port(rows):
    syns = [r for r in rows if r["proto"] == "tcp" and int(r.get("tcp_flags") or 0) & 0x02]
    return int(min(syns, key=lambda r: int(r["start_ns"]))["dst_port"]) if syns else None


def phase_ns(node, sample_ns):
    return int(hashlib.sha256(node.encode()).hexdigest(), 16) % sample_ns


def add_spread(series, t0, t1, nbytes, sample_ns, phase):
    """Counts nbytes spread over [t0, t1] into the node's sampling intervals (index k: [phase + k*S, +S))."""
    if t1 <= t0:
        series[(t0 - phase) // sample_ns] += nbytes
        return
    k = (t0 - phase) // sample_ns
    while True:
        lo = max(t0, phase + k * sample_ns)
        hi = min(t1, phase + (k + 1) * sample_ns)
        if lo >= t1:
            break
        series[k] += nbytes * (hi - lo) / (t1 - t0)
        k += 1


def derive(sample, sample_ms):
    addr_node, rows = load(sample)
    sample_ns = int(sample_ms * 1e6)
    boot = bootstrap_port(rows)
    xmit = collections.defaultdict(lambda: collections.defaultdict(float))
    rcv = collections.defaultdict(lambda: collections.defaultdict(float))
    pairs = {}  # (a, b) sorted -> [first_ns, last_ns, closed_ns or None]
    pkts = {}  # (src, dst) -> (node, sampling interval of that node) -> data packets
    flows, end_ns = [], 0
    for r in rows:
        src, dst = addr_node.get(r["src_ip"]), addr_node.get(r["dst_ip"])
        t0, t1, nbytes = int(r["start_ns"]), int(r["end_ns"]), int(r["bytes"])
        end_ns = max(end_ns, t1)
        if src is None or dst is None or src == dst:
            continue
        if boot is not None and boot in (int(r["src_port"]), int(r["dst_port"])):
            flows.append({k: r[k] for k in r if k})  # the rendezvous connection stays TCP
            continue
        add_spread(xmit[src], t0, t1, nbytes, sample_ns, phase_ns(src, sample_ns))
        npk = int(r.get("packets") or 1)
        # RoCE packetises a message into MTU-sized packets (ROCE_MTU), one PSN each; RC acknowledgements do
        # not advance the sender's PSN (TCP rows of acknowledgements only: at most 80 bytes a packet).
        data_pkts = -(-nbytes // ROCE_MTU) if nbytes > 80 * npk else 0
        for node in (src, dst):  # counted at both ends' sampling phases (sq_psn at src, rq_psn at dst)
            ser = collections.defaultdict(float)
            add_spread(ser, t0, t1, data_pkts, sample_ns, phase_ns(node, sample_ns))
            for k, v in ser.items():
                pkts.setdefault((src, dst), collections.defaultdict(float))[(node, k)] += v
        add_spread(rcv[dst], t0, t1, nbytes, sample_ns, phase_ns(dst, sample_ns))
        p = pairs.setdefault(tuple(sorted((src, dst))), [t0, t1, None, 0])
        p[3] += nbytes
        p[0], p[1] = min(p[0], t0), max(p[1], t1)
        if int(r.get("tcp_flags") or 0) & 0x05:
            p[2] = max(p[2] or 0, t1)
    bursts = []
    for node in sorted(set(xmit) | set(rcv)):
        ph = phase_ns(node, sample_ns)
        for k in sorted(set(xmit[node]) | set(rcv[node])):
            x, rb = round(xmit[node].get(k, 0)), round(rcv[node].get(k, 0))
            if x or rb:
                bursts.append({"node": node, "device": "mlx5_0", "port": 1, "first_ns": ph + k * sample_ns,
                               "last_ns": ph + (k + 1) * sample_ns, "xmit_bytes": x, "rcv_bytes": rb})
    pairs = {k: p[:3] for k, p in pairs.items() if p[3] >= MIN_PAIR_BYTES}
    qps, reads = qp_tables(pairs, pkts, addr_node, end_ns, sample_ns)
    return {"derived_from": sample, "sample_ms": sample_ms, "addr_node": addr_node, "rdma_bursts": bursts,
            "qps": qps, "qp_read_ns": reads, "flows": flows}


def qp_number(node, peer):
    """A 24-bit QPN as a ConnectX NIC's firmware hands them out (spread over the range; node pairs do not share
    numbers in practice). Soft-RoCE numbers QPs from 17 upwards, which makes QPNs alone ambiguous across node
    pairs: that case is the QP pairing fixture test's (tests/analysis/counters_test.cpp)."""
    return int(hashlib.sha256(f"{node}>{peer}".encode()).hexdigest(), 16) % 0xfff000 + 0x100


def qp_tables(pairs, pkts, addr_node, end_ns, sample_ns):
    """Every node's QP table read at each of its sampling instants (the counters-only mode reads it with the
    counters), with each QP's PSNs: sq_psn advanced by the data packets it sent, rq_psn by those it received."""
    nodes = sorted(set(addr_node.values()))
    qpn = {(x, y): qp_number(x, y) for (a, b) in pairs for x, y in ((a, b), (b, a))}
    qps, reads = [], {}
    for (a, b), (first, last, closed) in sorted(pairs.items()):
        gone = closed if closed is not None else end_ns + sample_ns
        for x, y in ((a, b), (b, a)):
            ph = phase_ns(x, sample_ns)
            sent, got = pkts.get((x, y), {}), pkts.get((y, x), {})
            sq, rq = qp_number(x, y + "psn") & 0xFFFFFF, qp_number(y, x + "psn") & 0xFFFFFF
            k = (first - ph) // sample_ns + 1
            while ph + k * sample_ns <= gone:
                t = ph + k * sample_ns
                sq = (sq + round(sent.get((x, k - 1), 0))) & 0xFFFFFF
                rq = (rq + round(got.get((x, k - 1), 0))) & 0xFFFFFF
                qps.append({"node": x, "seen_ns": t, "device": "mlx5_0", "port": 1, "lqpn": qpn[(x, y)],
                            "rqpn": qpn[(y, x)], "type": "RC", "state": "RTS", "pid": 1000 + nodes.index(x),
                            "comm": "python3", "sq_psn": sq, "rq_psn": rq})
                reads[x] = max(reads.get(x, 0), t)
                k += 1
    # One more read of every table after the run: the QPs of closed connections are gone from it.
    for n in nodes:
        reads[n] = max(reads.get(n, 0), end_ns) + sample_ns
    return qps, reads


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sample", help="a recording directory (tests/e2e/samples/NAME)")
    ap.add_argument("out", help="the RDMA counters recording to write (JSON)")
    ap.add_argument("--sample-ms", type=float, default=10.0, help="counter sampling interval (default 10)")
    a = ap.parse_args()
    doc = derive(a.sample, a.sample_ms)
    with open(a.out, "w") as f:
        json.dump(doc, f)
    print(f"counters_derive: {len(doc['rdma_bursts'])} port bursts, {len(doc['qps'])} QP rows, "
          f"{len(doc['flows'])} bootstrap flow rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
