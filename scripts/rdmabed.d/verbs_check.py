"""The checks of the soft-RoCE verbs scenario (issue 16, acceptance items 1 and 2), pure functions over what the
run collected: the probe's flows (`netprism flows --json`), the agent's stored RDMA samples and QP rows
(np_rdma_dump), eth0's and rxe0's counters before and after the traffic, `rdma -j resource show qp` snapshots
taken every 0.2 s in each VM, and the tools that ran (size, iterations).

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
        d = {k: after[i][k] - before[i][k] for k in after[i] if k in before[i]}
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
    # Both ends saw the same traffic: a flow's sender and receiver agree, key for key.
    by_key = {}
    for f in flows:
        if f["proto"] == "roce":
            by_key.setdefault((f["src"], f["dst"], f["qpn"]), {})[f["node"]] = (f["packets"], f["bytes"])
    ips = {vc.data_ip(i): f"node{i}" for i in range(n)}
    mismatch = [(k, v) for k, v in by_key.items()
                if v.get(ips.get(k[0])) is None or v.get(ips.get(k[0])) != v.get(ips.get(k[1]))]
    ck.add("sender's and receiver's probe agree on every RoCE flow", not mismatch and by_key, mismatch[:3])


def check_qps_accounted(ck, n, flows, qp_rows):
    """Item 1: every RC QP `rdma resource show qp` listed carries flows both ways, and every RoCE flow belongs
    to a listed QP (egress: BTH dest QP = the QP's remote QPN; ingress: = its local QPN)."""
    rc = [q for q in qp_rows if q["type"] == "RC" and q["state"] == "RTS"]
    ck.add("rdma resource show qp listed RC QPs in RTS", rc, len(rc))
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
    cs = [q for q in qp_rows if q["node"] == f"node{run['client']}" and q["comm"] == comm and q["state"] == "RTS"]
    ss = [q for q in qp_rows if q["node"] == f"node{run['server']}" and q["comm"] == comm and q["state"] == "RTS"]
    for c in cs:
        for s in ss:
            if c["rqpn"] == s["lqpn"] and s["rqpn"] == c["lqpn"]:
                return c, s
    return None, None


def check_tools(ck, mtu, runs, flows, qp_rows):
    """Item 1: the tools' own byte counts (size x iterations) are exactly the RDMA payload on the wire."""
    sent = seen = 0
    for r in runs:
        c, s = pair_of(qp_rows, r)
        if not c:
            ck.add(f"{r['name']}: QP pair found", False, "no paired RC QPs of the tool in the rdma snapshots")
            continue
        a, b = vc.data_ip(r["client"]), vc.data_ip(r["server"])
        cnode = f"node{r['client']}"
        fwd = flow_sum(flows, node=cnode, proto="roce", src=a, dst=b, qpn=c["rqpn"])
        rev = flow_sum(flows, node=cnode, proto="roce", src=b, dst=a, qpn=c["lqpn"])
        size, iters = r["size"], r["iters"]
        per_msg = math.ceil(size / mtu)
        dp = iters * per_msg
        if r["name"] == "pingpong":  # both ways: iters sends of size each, plus ACKs
            for way, (p, _, pay, _) in (("client->server", fwd), ("server->client", rev)):
                data = pay - BTH_ICRC * dp - ACK_PAYLOAD * (p - dp)
                ck.add(f"pingpong {way}: RDMA payload == {iters} x {size}", p >= dp and data == size * iters,
                       f"{p} pkts ({dp} data), payload {pay} -> data {data}")
                sent, seen = sent + size * iters, seen + data
            continue
        p, _, pay, _ = fwd
        reth = RETH * iters if r["name"] == "write_bw" else 0
        data = pay - BTH_ICRC * p - reth
        ck.add(f"{r['name']}: data packets == {iters} x ceil({size}/{mtu})", p == dp, f"{p} vs {dp}")
        ck.add(f"{r['name']}: RDMA payload == {iters} x {size}", data == size * iters, f"{data} vs {size * iters}")
        ck.add(f"{r['name']}: the reverse way carries ACKs only", rev[2] == ACK_PAYLOAD * rev[0] and rev[0] > 0,
               f"{rev[0]} pkts, payload {rev[2]}")
        sent, seen = sent + size * iters, seen + data
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
        want = {k[3:]: after[i][k] - before[i][k] for k in after[i] if k.startswith("hw.") and k != "hw.lifespan"}
        got = {k: last["hw"].get(k, 0) - first["hw"].get(k, 0) for k in want}
        ck.add(f"{node}: agent's rxe0 hw_counters deltas == the VM's", got == want and want.get("sent_pkts"),
               {k: (got[k], want[k]) for k in want if got[k] or want[k]})
        ck.add(f"{node}: agent's packet series == hw sent/rcvd_pkts",
               (last["xmit_packets"] - first["xmit_packets"], last["rcv_packets"] - first["rcv_packets"]) ==
               (want.get("sent_pkts"), want.get("rcvd_pkts")), (last["xmit_packets"], last["rcv_packets"]))
    agent = {qp_key(q) for q in dump["qps"] if q["type"] == "RC"}
    tool = {qp_key(q) for q in qp_rows if q["type"] == "RC"}
    tool_rts = {k for k in tool if k[4] == "RTS"}
    agent_rts = {k for k in agent if k[4] == "RTS"}
    ck.add("agent's QP table has every RTS QP rdma listed (lqpn, rqpn, type, state, pid)",
           tool_rts and tool_rts <= agent, sorted(tool_rts - agent)[:5])
    ck.add("every RTS QP in the agent's table was listed by rdma", agent_rts <= tool, sorted(agent_rts - tool)[:5])
    conns, unpaired = set(), []
    for k in agent_rts:
        partner = [o for o in agent_rts if o[0] != k[0] and o[1] == k[2] and o[2] == k[1] and o[3] == k[3]]
        if len(partner) == 1:
            conns.add(tuple(sorted((k[0], partner[0][0]))))
        else:
            unpaired.append(k)
    ck.add("every RTS QP pairs with one QP on another node (LQPN/RQPN)", not unpaired and conns, unpaired[:5])
    return sorted(f"{a}<->{b}" for a, b in conns)


def check(n, mtu, runs, before, after, flows, dump, qp_rows):
    ck = Checks()
    check_wire(ck, n, before, after, flows)
    check_qps_accounted(ck, n, flows, qp_rows)
    sent, seen = check_tools(ck, mtu, runs, flows, qp_rows)
    conns = check_agent_rdma(ck, n, before, after, dump, qp_rows)
    return {"ok": ck.ok(), "verbs_bytes_sent": sent, "verbs_bytes_seen": seen, "connections": conns,
            "failed": [c for c in ck.items if not c["ok"]], "checks": len(ck.items),
            "tool_seconds": {r["name"]: round(r["seconds"], 1) for r in runs}, "details": ck.items}
