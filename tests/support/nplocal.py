"""Helpers shared by the Python drivers that start a real aggregator on local ports (tests/ and bench/)."""
import json
import socket

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
