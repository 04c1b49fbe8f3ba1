"""Helpers shared by the Python drivers that start a real aggregator on local ports (tests/ and bench/)."""
import json
import os
import socket
import subprocess

import zmq


def free_ports(n):
    """n ports the kernel reports free (a random pick could land on a port an outgoing connection holds)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def collector_keys(netprism, keys, role):
    """CURVE for an aggregator fed only by flow collectors, like a real install: a server key, no agent keys
    (the collectors feed ingest with a key the aggregator makes in memory), one client of `role` whose key the
    CLI then uses (NETPRISM_KEY / NETPRISM_SERVER_PUB). Returns the aggregator's key flags."""
    os.makedirs(keys, exist_ok=True)
    for who in ("server", "client"):
        subprocess.run([netprism, "keygen", "--out", os.path.join(keys, who)], check=True, capture_output=True,
                       timeout=30)
    with open(os.path.join(keys, "agents"), "w") as f:
        f.write("# no agents: only the collectors write\n")
    with open(os.path.join(keys, "clients"), "w") as f:
        f.write(f"{role} " + open(os.path.join(keys, "client.pub")).read().strip() + "\n")
    os.environ["NETPRISM_KEY"] = os.path.join(keys, "client.key")
    os.environ["NETPRISM_SERVER_PUB"] = os.path.join(keys, "server.pub")
    return ["--server-key", os.path.join(keys, "server.key"), "--agents", os.path.join(keys, "agents"),
            "--clients", os.path.join(keys, "clients")]


class Query:
    """One REQ round trip per call to the aggregator's query endpoint (plain TCP: the daemon runs --insecure).
    Returns the answer's result, or None on a timeout or an error answer."""

    def __init__(self, endpoint, timeout_ms=5000, ctx=None):
        self.ctx, self.endpoint, self.timeout_ms = ctx or zmq.Context(), endpoint, timeout_ms

    def __call__(self, req):
        s = self.ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
        s.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
        s.connect(self.endpoint)
        try:
            s.send_string(json.dumps(req))
            rep = json.loads(s.recv_string())
        except zmq.Again:
            return None
        finally:
            s.close()
        return rep.get("result") if rep.get("ok") else None
