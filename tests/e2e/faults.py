#!/usr/bin/python3
"""Fault specifications of the testbed (testbed.py --fault KIND:key=value,...): parsed and checked here."""
import fabric


def parse_kv(text, what):
    out = {}
    for part in filter(None, text.split(",")):
        if "=" not in part:
            raise ValueError(f"{what}: {part!r} is not key=value")
        k, v = part.split("=", 1)
        out[k.strip().replace("-", "_")] = v.strip()
    return out


def parse_fault(text, jobs):
    kind, _, rest = text.partition(":")
    kv = parse_kv(rest, f"fault {text!r}")
    job = next((j for j in jobs if j["name"] == kv.pop("job", "job0")), None)
    if job is None:
        raise ValueError(f"fault {text!r}: unknown job")
    f = {"kind": kind, "job": job["name"]}
    if kind in fabric.FAULT_KEYS:
        return fabric.parse_fault(kind, kv, f)
    known = {"straggler": {"node", "rank", "factor", "from"}, "slowlink": {"node", "rate", "from", "burst"},
             "hang": {"node", "rank", "at", "hold"}, "pause": {"at", "seconds"}, "eval": {"at", "batches"},
             "cpuload": {"workers"}}
    if kind not in known:
        raise ValueError(f"unknown fault kind {kind!r} ({', '.join(list(known) + list(fabric.FAULT_KEYS))})")
    extra = set(kv) - known[kind]
    if extra:
        raise ValueError(f"fault {kind}: unknown keys {sorted(extra)}")
    tp = 1 if job.get("tp_nodes") else job["tp"]  # ranks per node
    if "rank" in kv:
        f["rank"] = int(kv["rank"])
        f["node"] = f"n{job['node_base'] + f['rank'] // tp}"
    elif "node" in kv:
        f["node"] = kv["node"]
        if f["node"] not in job["nodes"]:
            raise ValueError(f"fault {kind}: node {f['node']} is not one of {job['name']}'s nodes {job['nodes']}")
        f["rank"] = (int(f["node"][1:]) - job["node_base"]) * tp  # the node's TP rank 0
    elif kind not in ("pause", "eval", "cpuload"):
        raise ValueError(f"fault {kind}: needs node= or rank=")
    if kind == "straggler":
        f["factor"] = float(kv.get("factor", 1.5))
        f["from"] = int(kv.get("from", 0))
        if f["factor"] <= 1.0:
            raise ValueError("straggler factor must be > 1")
    elif kind == "slowlink":
        f["rate"] = kv.get("rate", "20mbit")
        f["burst"] = kv.get("burst", "32kb")
        f["from"] = int(kv.get("from", 0))
    elif kind == "hang":
        f["at"] = int(kv.get("at", job["iters"] // 2))
        f["hold"] = float(kv.get("hold", 6))
        if f["at"] >= job["iters"]:
            raise ValueError("hang: at must be < iters")
    elif kind == "pause":
        f["at"] = int(kv.get("at", job["iters"] // 2))
        f["seconds"] = float(kv.get("seconds", 2.0))
    elif kind == "eval":
        f["at"], f["batches"] = int(kv.get("at", job["iters"] // 2)), int(kv.get("batches", 8))
        if job["stack"] != "gloo":
            raise ValueError("eval: gloo stack only")
    elif kind == "cpuload":
        f["workers"] = int(kv.get("workers", 2))
    return f
