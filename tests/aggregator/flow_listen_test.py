#!/usr/bin/python3
"""`netprism-aggregator --flow-listen` without root: the committed exporters' captures (tests/data/flow_export)
are replayed as UDP datagrams to a real aggregator's IPFIX and sFlow sockets (from the config file's
`flow_listen`; the flag is exercised by the error cases and tests/e2e/flow_export_test.py), then:
  - every exporter is registered as its synthetic node with exactly the records the offline decoder finds
    (np_flowdump on the same capture), and `netprism flows` shows the same bytes per flow;
  - a recording of what the aggregator stored (`netprism record`) analyses to the same job, with the same
    parallelism, as `netprism analyze --format ipfix` on the capture (live and offline read one way);
  - bad URLs are usage errors (2), a port that cannot be bound is an error (1), both with one line.

usage: flow_listen_test.py NETPRISM NETPRISM_AGGREGATOR NP_FLOWDUMP DATA_DIR
"""
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import nplocal  # noqa: E402

IPFIX = "softflowd_ipfix.pcap"
SFLOW = "pmacct_sfprobe_sflow.pcap"


def datagrams(path):
    """UDP payloads of a classic pcap of Ethernet/IPv4 frames (the committed captures: tcpdump on lo)."""
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off, out = 24, []
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        ihl = (frame[14] & 0x0F) * 4
        if frame[12:14] == b"\x08\x00" and frame[14 + 9] == 17:
            udp = 14 + ihl
            length = struct.unpack(">H", frame[udp + 4:udp + 6])[0]
            out.append(frame[udp + 8:udp + length])
    return out


def free_port(kind):
    for _ in range(200):
        port = random.randrange(10000, 19998)
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                pass
    raise RuntimeError("no free port")


def flowdump(tool, path, fmt):
    r = subprocess.run([tool, path, fmt], capture_output=True, text=True, check=True)
    rows = [l.split(",") for l in r.stdout.splitlines()[1:] if not l.startswith("#")]
    return rows


def main():
    netprism, aggr, tool, data = sys.argv[1:5]
    work = tempfile.mkdtemp(prefix="np-flowlisten-")
    fails = []
    proc = None
    try:
        lp, qp = free_port(socket.SOCK_STREAM), free_port(socket.SOCK_STREAM)
        ipfix_port, sflow_port = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_DGRAM)
        conf = os.path.join(work, "aggregator.toml")
        with open(conf, "w") as f:
            # Both collectors from the file (a --flow-listen flag would replace the file's list: flags win).
            f.write(f'flow_listen = ["ipfix://127.0.0.1:{ipfix_port}", "sflow://127.0.0.1:{sflow_port}"]\n')
        query = f"tcp://127.0.0.1:{qp}"
        # CURVE like a real install, with an admin client (flows and record need it).
        base = [aggr, "--listen", f"tcp://127.0.0.1:{lp}", "--query", query, "--data-dir",
                os.path.join(work, "data"), *nplocal.collector_keys(netprism, work, "admin")]

        # Usage and bind errors first: one line, the right exit code.
        for args, want, what in (([ "--flow-listen", "ipfix://nohost:1"], 2, "numeric IP"),
                                 (["--flow-listen", "gre://0.0.0.0:1"], 2, "ipfix://"),
                                 (["--flow-listen", "ipfix://0.0.0.0:0"], 2, "port")):
            r = subprocess.run(base + args, capture_output=True, text=True, timeout=30)
            if r.returncode != want or what not in r.stderr or len(r.stderr.strip().splitlines()) != 1:
                fails.append(f"{args}: exit {r.returncode}, stderr {r.stderr.strip()!r}")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
            held.bind(("127.0.0.1", 0))
            busy = held.getsockname()[1]
            r = subprocess.run(base + ["--flow-listen", f"ipfix://127.0.0.1:{busy}"], capture_output=True,
                               text=True, timeout=30)
            if r.returncode != 1 or "cannot bind" not in r.stderr:
                fails.append(f"busy port: exit {r.returncode}, stderr {r.stderr.strip()!r}")

        proc = subprocess.Popen(base + ["--config", conf, "--topology", os.path.join(data, "topology.txt")],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "aggr.log"), "w"))

        def cli(*args):
            r = subprocess.run([netprism, "--aggregator", query, *args, "--json"], capture_output=True,
                               text=True, timeout=30)
            if r.returncode != 0:
                raise RuntimeError(f"netprism {' '.join(args)}: {r.stderr.strip()}")
            return json.loads(r.stdout)

        for _ in range(50):
            try:
                cli("status")
                break
            except RuntimeError:
                time.sleep(0.2)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for name, port in ((IPFIX, ipfix_port), (SFLOW, sflow_port)):
                for d in datagrams(os.path.join(data, name)):
                    s.sendto(d, ("127.0.0.1", port))
                    time.sleep(0.001)  # the socket buffer is not the thing tested
        want = {"ipfix:127.0.0.1": flowdump(tool, os.path.join(data, IPFIX), "ipfix"),
                "sflow:10.213.6.254": flowdump(tool, os.path.join(data, SFLOW), "sflow")}
        agents = {}
        for _ in range(50):  # batches leave every 100 ms; committed shortly after
            agents = {a["node"]: a["records"] for a in cli("status")["agents"]}
            if all(agents.get(n) == len(rows) for n, rows in want.items()):
                break
            time.sleep(0.2)
        print(f"exporters registered: {agents}; decoded offline: { {n: len(r) for n, r in want.items()} }")
        for n, rows in want.items():
            if agents.get(n) != len(rows):
                fails.append(f"{n}: {agents.get(n)} records stored, {len(rows)} decoded offline")
            flows = cli("flows", "--node", n, "--limit", "0")["flows"]
            live = sum(f["bytes"] for f in flows)
            offline = sum(int(r[10]) for r in rows)
            print(f"{n}: {len(flows)} flows, {live} bytes stored, {offline} decoded offline")
            if live != offline:
                fails.append(f"{n}: {live} bytes stored, {offline} decoded offline")

        # The IPFIX exporter's stored records, recorded and analysed, against the capture analysed offline.
        rec = os.path.join(work, "rec.db")
        subprocess.run([netprism, "--aggregator", query, "record", "--output", rec], check=True,
                       capture_output=True, timeout=60)
        topo = os.path.join(data, "topology.txt")

        def analyze(*args):
            r = subprocess.run([netprism, "analyze", *args, "--topology", topo, "--json"], capture_output=True,
                               text=True, timeout=60)
            return [(sorted(j["nodes"]), j["parallelism"]) for j in json.loads(r.stdout)["jobs"]]
        offline = analyze("--input", os.path.join(data, IPFIX), "--format", "ipfix")
        stored = analyze("--input", rec, "--format", "native")
        ipfix_only = [j for j in stored if j[0] == ["n0", "n1", "n2", "n3"]]
        print(f"offline {offline}\nstored  {stored}")
        if not offline or offline[0][0] != ["n0", "n1", "n2", "n3"]:
            fails.append(f"offline analysis of the IPFIX capture: {offline}")
        if not ipfix_only:
            fails.append(f"the stored records give no job of n0..n3: {stored}")
        elif offline and ipfix_only[0][1] != offline[0][1]:
            fails.append(f"stored records analyse to {ipfix_only[0][1]}, the capture to {offline[0][1]}")
    finally:
        if proc:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
