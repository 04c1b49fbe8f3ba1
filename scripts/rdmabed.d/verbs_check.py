"""The checks of the soft-RoCE verbs scenario (issue 16, acceptance items 1 and 2), pure functions over what the
run collected: the probe's flows (`netprism flows --json`), the agent's stored RDMA samples and QP rows
(np_rdma_dump), eth0's and rxe0's counters before and after the traffic, `rdma -j resource show qp` snapshots
taken every 0.5 s in each VM, and the tools that ran (size, iterations).

RoCEv2 packet sizes (IBTA; rxe adds no extensions): UDP payload = BTH 12 + ICRC 4 + (RETH 16 on the first
packet of an RDMA WRITE) + data; an ACK is BTH + AETH 4 + ICRC = 20 bytes. IP-level bytes = UDP payload + 28;
eth0's counters add the 14-byte Ethernet header (virtio: no FCS).
"""
import json
import math

import vmcluster as vc

BTH_ICRC, RETH, ACK_PAYLOAD, IP_UDP, ETH = 16, 16, 20, 28, 14
TOOL_COMM = {"write_bw": "ib_write_bw", "send_bw": "ib_send_bw", "pingpong": "ibv_rc_pingpong"}


def parse_qp_watch(node, text):
    """Rows of every `rdma -j resource show qp` snapshot, with the node added; duplicates merged."""
    seen, rows = set(), []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("["):
            continue
        try:
            snap = json.loads(line)
        except ValueError:
            continue  # a snapshot cut by the watcher's stop
        for q in snap:
            row = {"node": node, "lqpn": q.get("lqpn"), "rqpn": q.get("rqpn"), "type": q.get("type"),
                   "state": q.get("state"), "pid": q.get("pid", 0), "comm": q.get("comm", "")}
            key = tuple(sorted(row.items()))
            if key not in seen:
                seen.add(key)
                rows.append(row)
    return rows


def connected(q):
    """An RC QP that knows its peer: RTR (a pure responder, e.g. perftest's server) or RTS."""
    return q["type"] == "RC" and q["state"] in ("RTR", "RTS") and q.get("rqpn")


def qp_key(r):
    return (r["node"], r["lqpn"], r.get("rqpn") or 0, r["type"], r["state"], r.get("pid") or 0)


class Checks:
    def __init__(self):
        self.items = []

    def add(self, name, ok, detail):
        self.items.append({"check": name, "ok": bool(ok), "detail": detail})

    def ok(self):
        return all(c["ok"] for c in self.items)


def flow_sum(flows, **match):
    sel = [f for f in flows if all(f[k] == v for k, v in match.items())]
    return (sum(f["packets"] for f in sel), sum(f["bytes"] for f in sel), sum(f["payload_bytes"] for f in sel),
            len(sel))


def check_wire(ck, n, before, after, flows):
    """Item 1: per node and direction, the probe's RoCE flows == eth0's counters == rxe's hw_counters."""
    for i in range(n):
        node, ip = f"node{i}", vc.data_ip(i)
        d = vc.snapshot_delta(before[i], after[i])
        mine = [f for f in flows if f["node"] == node]
        other = [f"{f['proto']} {f['src']}->{f['dst']}" for f in mine if f["proto"] != "roce"]
        ck.add(f"{node}: eth0 carries RoCE only", not other, other[:5])
        for way, field, hw in (("tx", "src", "hw.sent_pkts"), ("rx", "dst", "hw.rcvd_pkts")):
            p, b, _, _ = flow_sum(mine, proto="roce", **{field: ip})
            ck.add(f"{node} {way}: probe packets == eth0 packets == rxe {hw[3:]}",
                   p == d[f"if.{way}_packets"] == d[hw], f"{p} {d[f'if.{way}_packets']} {d[hw]}")
            ck.add(f"{node} {way}: probe IP bytes + 14/packet == eth0 bytes", b + ETH * p == d[f"if.{way}_bytes"],
                   f"{b} + {ETH}*{p} vs {d[f'if.{way}_bytes']}")
    bad = [f for f in flows if f["proto"] == "roce" and f["bytes"] != f["payload_bytes"] + IP_UDP * f["packets"]]
    ck.add("every RoCE flow: IP bytes == UDP payload + 28/packet", not bad, bad[:3])
    # Both ends watched the same flows: the receiver saw what the sender sent, less what the path between
    # them (taps, bridge) dropped; a drop shows as a retransmission in rxe's counters.
    by_key = {}
    for f in flows:
        if f["proto"] == "roce":
            by_key.setdefault((f["src"], f["dst"], f["qpn"]), {})[f["node"]] = (f["packets"], f["bytes"])
    ips = {vc.data_ip(i): f"node{i}" for i in range(n)}
    lost, bad = {}, []
    for k, v in by_key.items():
        sent, rcvd = v.get(ips.get(k[0])), v.get(ips.get(k[1]))
        if sent is None or rcvd is None or rcvd[0] > sent[0] or rcvd[1] > sent[1]:
            bad.append((k, v))
        elif sent != rcvd:
            lost[f"{k[0]}->{k[1]} qpn {k[2]}"] = sent[0] - rcvd[0]
    ck.add("both ends' probes saw every RoCE flow, the receiver no more than the sender", not bad and by_key,
           bad[:3])
    return lost


def check_qps_accounted(ck, n, flows, qp_rows):
    """Item 1: every RC QP `rdma resource show qp` listed carries flows both ways, and every RoCE flow belongs
    to a listed QP (egress: BTH dest QP = the QP's remote QPN; ingress: = its local QPN)."""
    rc = [q for q in qp_rows if connected(q)]
    ck.add("rdma resource show qp listed connected RC QPs", rc, len(rc))
    for q in rc:
        ip = vc.data_ip(int(q["node"][4:]))
        node_flows = [f for f in flows if f["node"] == q["node"] and f["proto"] == "roce"]
        out = flow_sum(node_flows, src=ip, qpn=q["rqpn"])[0]
        inn = flow_sum(node_flows, dst=ip, qpn=q["lqpn"])[0]
        ck.add(f"{q['node']} QP {q['lqpn']}->{q['rqpn']} ({q['comm']}) has flows both ways", out and inn,
               f"out {out} pkts, in {inn} pkts")
    for i in range(n):
        node, ip = f"node{i}", vc.data_ip(i)
        mine = [q for q in rc if q["node"] == node]
        stray = [f for f in flows if f["node"] == node and f["proto"] == "roce" and not (
            (f["src"] == ip and any(f["qpn"] == q["rqpn"] for q in mine)) or
            (f["dst"] == ip and any(f["qpn"] == q["lqpn"] for q in mine)))]
        ck.add(f"{node}: every RoCE flow belongs to a listed QP", not stray, stray[:3])


def pair_of(qp_rows, run):
    """The run's client and server QP rows: the client's row of the tool whose remote QPN is a server row's
    local QPN and back."""
    comm = TOOL_COMM[run["name"]]
    cs = [q for q in qp_rows if q["node"] == f"node{run['client']}" and q["comm"] == comm and connected(q)]
    ss = [q for q in qp_rows if q["node"] == f"node{run['server']}" and q["comm"] == comm and connected(q)]
    for c in cs:
        for s in ss:
            if c["rqpn"] == s["lqpn"] and s["rqpn"] == c["lqpn"]:
                return c, s
    return None, None


def data_packets(name, p, pay, mtu):
    """(data packets, ACK/NAK packets) of one direction's RoCE totals, when every data packet carries a full
    MTU (sizes here are multiples of it): pay = (16 + mtu) D + 20 A (+ 16 per first WRITE packet, F <= D)."""
    if name == "write_bw":  # no ACKs this way; F = (pay - (16 + mtu) p) / 16 first packets
        return p, 0, (pay - (BTH_ICRC + mtu) * p) / RETH
    d = (pay - ACK_PAYLOAD * p) / (BTH_ICRC + mtu - ACK_PAYLOAD)
    return d, p - d, 0


def check_tools(ck, mtu, runs, flows, qp_rows):
    """Item 1: the tools' own byte counts (size x iterations) against the RDMA payload the receiver's probe
    saw. Exact when the run had no retransmission (the receiver's rxe counted no duplicate or out-of-sequence
    request); otherwise the retransmitted packets are counted once per copy on the wire, and rxe counts an
    out-of-sequence burst once, so the check is: unique data >= the tool's, and the surplus is reported."""
    sent = seen = 0
    for r in runs:
        c, s = pair_of(qp_rows, r)
        if not c:
            ck.add(f"{r['name']}: QP pair found", False, "no paired RC QPs of the tool in the rdma snapshots")
            continue
        size, iters, name = r["size"], r["iters"], r["name"]
        want = iters * math.ceil(size / mtu)
        ways = [(r["client"], r["server"], c["rqpn"])]
        if name == "pingpong":
            ways.append((r["server"], r["client"], s["rqpn"]))
        else:  # the other way carries ACKs only
            p, _, pay, _ = flow_sum(flows, node=f"node{r['client']}", proto="roce", src=vc.data_ip(r["server"]),
                                    dst=vc.data_ip(r["client"]), qpn=c["lqpn"])
            ck.add(f"{name}: the reverse way carries ACKs only", p > 0 and pay == ACK_PAYLOAD * p,
                   f"{p} pkts, payload {pay}")
        for x, y, qpn in ways:
            rx = f"node{y}"
            p, _, pay, _ = flow_sum(flows, node=rx, proto="roce", src=vc.data_ip(x), dst=vc.data_ip(y), qpn=qpn)
            d, acks, firsts = data_packets(name, p, pay, mtu)
            hw = r["hw"][rx]
            retrans = hw.get("hw.duplicate_request", 0) + hw.get("hw.out_of_seq_request", 0)
            label = f"{name} node{x}->node{y}"
            ck.add(f"{label}: every data packet full ({mtu} B)", d == int(d) and firsts == int(firsts),
                   f"{p} pkts, payload {pay}")
            if retrans == 0:
                ok = d == want and (name != "write_bw" or firsts == iters)
                ck.add(f"{label}: data == {iters} x {size} B exactly (no retransmission)", ok,
                       f"{int(d)} data pkts vs {want}, {int(acks)} ACKs")
            else:
                ck.add(f"{label}: unique data >= {iters} x {size} B ({retrans} retransmitted per rxe)",
                       d - retrans >= want, f"{int(d)} data pkts, {retrans} dup/out-of-seq, want {want}")
            sent += size * iters
            seen += int(d - retrans) * mtu  # retransmitted copies rxe counted are not new data
            r.setdefault("retransmissions", {})[label] = retrans
    return sent, seen


def check_agent_rdma(ck, n, before, after, dump, qp_rows):
    """Item 2: the agent's sysfs samples move as rxe's hw_counters did; its netlink QP table is what
    `rdma resource show qp` printed; QPs pair across nodes into connections."""
    for i in range(n):
        node = f"node{i}"
        ss = sorted((s for s in dump["samples"] if s["node"] == node and s["device"] == "rxe0"),
                    key=lambda s: s["ts_ns"])
        if len(ss) < 2:
            ck.add(f"{node}: agent shipped rxe0 samples", False, len(ss))
            continue
        first, last = ss[0], ss[-1]
        d = vc.snapshot_delta(before[i], after[i])
        want = {k[3:]: v for k, v in d.items() if k.startswith("hw.") and k != "hw.lifespan"}
        got = {k: last["hw"].get(k, 0) - first["hw"].get(k, 0) for k in want}
        ck.add(f"{node}: agent's rxe0 hw_counters deltas == the VM's", got == want and want.get("sent_pkts"),
               {k: (got[k], want[k]) for k in want if got[k] or want[k]})
        # rxe counts no bytes: the agent ships its interface's bytes and packets (agent/rdma/sysfs.hpp), which
        # over the run are rxe's packets too (check_wire: eth0 == hw sent/rcvd_pkts).
        pk = (last["xmit_packets"] - first["xmit_packets"], last["rcv_packets"] - first["rcv_packets"])
        ck.add(f"{node}: agent's packet series == eth0's packets == hw sent/rcvd_pkts",
               pk == (d["if.tx_packets"], d["if.rx_packets"]) == (want.get("sent_pkts"), want.get("rcvd_pkts")),
               (pk, d["if.tx_packets"], d["if.rx_packets"]))
        by = (last["xmit_bytes"] - first["xmit_bytes"], last["rcv_bytes"] - first["rcv_bytes"])
        ck.add(f"{node}: agent's byte series == eth0's bytes (whole 4-byte words)",
               abs(by[0] - d["if.tx_bytes"]) <= 3 and abs(by[1] - d["if.rx_bytes"]) <= 3,
               (by, d["if.tx_bytes"], d["if.rx_bytes"]))
    agent = {qp_key(q) for q in dump["qps"] if q["type"] == "RC"}
    tool = {qp_key(q) for q in qp_rows if q["type"] == "RC"}
    tool_conn = {k for k in tool if k[4] in ("RTR", "RTS")}
    agent_conn = {k for k in agent if k[4] in ("RTR", "RTS")}
    ck.add("agent's QP table has every connected QP rdma listed (lqpn, rqpn, type, state, pid)",
           tool_conn and tool_conn <= agent, sorted(tool_conn - agent)[:5])
    ck.add("every connected QP in the agent's table was listed by rdma", agent_conn <= tool,
           sorted(agent_conn - tool)[:5])
    peers = {(k[0], k[1], k[2]) for k in agent_conn}
    conns, unpaired = set(), []
    for k in peers:  # a QP seen in RTR and RTS is one QP
        partner = [o for o in peers if o[0] != k[0] and o[1] == k[2] and o[2] == k[1]]
        if len(partner) == 1:
            conns.add(tuple(sorted((k[0], partner[0][0]))))
        else:
            unpaired.append(k)
    ck.add("every connected QP pairs with one QP on another node (LQPN/RQPN)", not unpaired and conns,
           unpaired[:5])
    return sorted(f"{a}<->{b}" for a, b in conns)


def check(n, mtu, runs, before, after, flows, dump, qp_rows):
    ck = Checks()
    lost = check_wire(ck, n, before, after, flows)
    check_qps_accounted(ck, n, flows, qp_rows)
    sent, seen = check_tools(ck, mtu, runs, flows, qp_rows)
    conns = check_agent_rdma(ck, n, before, after, dump, qp_rows)
    return {"ok": ck.ok(), "verbs_bytes_sent": sent, "verbs_bytes_seen": seen, "connections": conns,
            "lost_on_path": lost,
            "retransmissions": {k: v for r in runs for k, v in r.get("retransmissions", {}).items()},
            "failed": [c for c in ck.items if not c["ok"]], "checks": len(ck.items),
            "tool_seconds": {r["name"]: round(r["seconds"], 1) for r in runs}, "details": ck.items}
