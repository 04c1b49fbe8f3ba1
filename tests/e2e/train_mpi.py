#!/usr/bin/python3
"""One rank of a data-parallel training job on OpenMPI (mpi4py, numpy buffers), writing its own ground truth.

The testbed's second real training stack beside PyTorch gloo (train.py): launched by `mpirun` across the
namespaces (testbed.py, plm_rsh_agent netns_rsh), one rank per node, all in one DP group. OpenMPI picks its own
collective algorithms (tuned: ring, recursive doubling/halving, Rabenseifner by size and ranks) and its own
TCP connections, so the traffic has shapes gloo does not make.

Patterns (--pattern):
  allreduce  Horovod-style: the model's layers are grouped into gradient buckets; during the backward pass
             each bucket is handed, as soon as its layers' gradients are ready, to a background thread that
             all-reduces it (Horovod's background loop: blocking MPI_Allreduce on a duplicate communicator),
             overlapping communication with the rest of the backward pass. The step waits for every bucket.
  zero       ZeRO-style sharded optimizer: each bucket's gradient is reduce-scattered (MPI_Reduce_scatter_block)
             in the background as it becomes ready, each rank updates its own shard, then the updated
             parameter shards are all-gathered (MPI_Allgather) before the next forward pass.
  zero3      FSDP / ZeRO-3: parameters stay sharded; each bucket (an FSDP unit) is all-gathered right before
             its layers run, in the forward pass and again in the backward pass (the full parameters are
             freed after use), and its gradient is reduce-scattered in the background as soon as its backward
             is done; the optimizer updates the rank's own shards (--opt-ms of compute) before the next
             forward pass. DP traffic all through the iteration, no quiet forward pass.

Compute is emulated (sleep, as train.py's "emulated GPU"): forward --fwd-ms, backward twice that, spread
evenly over --layers layers.

Ground truth (truth/rank<R>.jsonl), the format of train.py:
  {"type":"meta", ...layout...}
  {"type":"iter","iter":i,"start":t0,"compute_end":t1,"sync_end":t2,"step_end":t3, ...layout...}
  {"type":"hang","iter":i,"time":t}    {"type":"end","time":t}
sync_end is when the rank's last synchronisation of the iteration returned (all buckets all-reduced; for
zero: the all-gather; for zero3: the last reduce-scatter), the instant the testbed's scorer takes as the
iteration boundary.
"""
import argparse
import json
import os
import queue
import signal
import socket
import sys
import threading
import time

import numpy as np
from mpi4py import MPI


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", required=True, help="node name of each rank, comma-separated")
    ap.add_argument("--job", default="job0")
    ap.add_argument("--pattern", choices=["allreduce", "zero", "zero3"], default="allreduce")
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--fwd-ms", type=float, default=60.0)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--buckets", type=int, default=4, help="gradient buckets (Horovod's fusion buffers)")
    ap.add_argument("--grad-mb", type=float, default=4.0, help="gradient megabytes per rank per iteration")
    ap.add_argument("--opt-ms", type=float, default=20.0, help="zero3: optimizer step on the own shards")
    ap.add_argument("--truth", required=True)
    ap.add_argument("--straggler-rank", type=int, default=-1)
    ap.add_argument("--straggler-factor", type=float, default=1.0)
    ap.add_argument("--straggler-from", type=int, default=0)
    ap.add_argument("--pause-at", type=int, default=-1)
    ap.add_argument("--pause-seconds", type=float, default=0.0)
    ap.add_argument("--hang-rank", type=int, default=-1)
    ap.add_argument("--hang-at", type=int, default=-1)
    ap.add_argument("--start-delay", type=float, default=0.0)
    return ap.parse_args()


class Background:
    """Horovod's background loop: collectives run one after another, in submission order, on their own
    communicator, while the training thread computes."""

    def __init__(self, comm):
        self.comm = comm
        self.q = queue.Queue()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while True:
            job = self.q.get()
            if job is None:
                return
            fn, done = job
            fn(self.comm)
            done.set()

    def submit(self, fn):
        done = threading.Event()
        self.q.put((fn, done))
        return done

    def close(self):
        self.q.put(None)
        self.t.join()


def zero3_step(a, comm, bg, shards, i, compute, shard, rank):
    """One FSDP iteration over the buckets' parameter shards (shards[b]: this rank's part of bucket b, kept
    in the first `shard` elements). Returns (compute_end, sync_end)."""
    world = comm.Get_size()
    full = np.empty(shard * world, dtype=np.float32)
    for b in range(a.buckets):  # forward: gather each unit's parameters right before its layers
        comm.Allgather(np.ascontiguousarray(shards[b][:shard]), full)
        compute(a.fwd_ms / a.buckets, i)
    pending = []
    for b in reversed(range(a.buckets)):  # backward: gather again, compute, reduce-scatter in the background
        comm.Allgather(np.ascontiguousarray(shards[b][:shard]), full)
        compute(2 * a.fwd_ms / a.buckets, i)
        grad = full * 0.5 + i
        out = np.empty(shard, dtype=np.float32)
        pending.append((b, out, bg.submit(lambda c, g=grad, o=out: c.Reduce_scatter_block(g, o))))
    t_compute = time.time()
    for _, _, done in pending:
        done.wait()
    t_sync = time.time()
    for b, out, _ in pending:
        shards[b][:shard] -= 1e-3 * out / world
    compute(a.opt_ms, i)  # the optimizer step on the own shards, before the next forward pass
    return t_compute, t_sync


def main():
    a = parse()
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    nodes = a.nodes.split(",")
    if len(nodes) != world:
        sys.exit(f"--nodes names {len(nodes)} nodes, the job has {world} ranks")
    if a.start_delay > 0:
        time.sleep(a.start_delay)
    bg = Background(comm.Dup())

    # Gradient buckets: equal float32 buffers, each a multiple of the world size (reduce-scatter shards).
    per_bucket = int(a.grad_mb * 1e6 / 4 / a.buckets) // world * world
    params = [np.full(per_bucket, 0.01 * (rank + 1), dtype=np.float32) for _ in range(a.buckets)]
    grads = [np.empty(per_bucket, dtype=np.float32) for _ in range(a.buckets)]
    shard = per_bucket // world
    layers_per_bucket = max(1, a.layers // a.buckets)

    os.makedirs(a.truth, exist_ok=True)
    log = open(os.path.join(a.truth, f"rank{rank}.jsonl"), "w", buffering=1)
    layout = {"job": a.job, "rank": rank, "node": nodes[rank], "stage": 0, "dp_rank": rank, "tp_rank": 0,
              "dp_group": 0, "pid": os.getpid()}
    log.write(json.dumps({"type": "meta", **layout, "stack": "openmpi", "pattern": a.pattern, "dp": world, "pp": 1,
                          "tp": 1, "world": world, "iters": a.iters, "fwd_ms": a.fwd_ms, "layers": a.layers,
                          "buckets": a.buckets, "grad_mb": a.grad_mb, "host": socket.gethostname(),
                          "mpi": MPI.Get_library_version().splitlines()[0],
                          "straggler_factor": a.straggler_factor if rank == a.straggler_rank else 1.0,
                          "straggler_from": a.straggler_from, "pause_at": a.pause_at,
                          "pause_seconds": a.pause_seconds,
                          "hang_at": a.hang_at if rank == a.hang_rank else -1}) + "\n")
    comm.Barrier()

    def slow(i):
        return a.straggler_factor if rank == a.straggler_rank and i >= a.straggler_from else 1.0

    def compute(ms, i):
        time.sleep(ms / 1000.0 * slow(i))

    for i in range(a.iters):
        t_start = time.time()
        if rank == a.hang_rank and i == a.hang_at:
            log.write(json.dumps({"type": "hang", **layout, "iter": i, "time": time.time()}) + "\n")
            log.flush()
            os.kill(os.getpid(), signal.SIGSTOP)
        if i == a.pause_at:
            time.sleep(a.pause_seconds)
        if a.pattern == "zero3":
            t_compute, t_sync = zero3_step(a, comm, bg, params, i, compute, shard, rank)
            log.write(json.dumps({"type": "iter", **layout, "iter": i, "start": t_start, "compute_end": t_compute,
                                  "sync_end": t_sync, "step_end": time.time(), "straggling": slow(i) > 1.0,
                                  "overruns": 0, "paused": i == a.pause_at}) + "\n")
            continue
        compute(a.fwd_ms, i)  # forward pass
        pending = []
        bwd_layer_ms = 2 * a.fwd_ms / (layers_per_bucket * a.buckets)
        for b in reversed(range(a.buckets)):  # backward: the last layers' gradients are ready first
            compute(bwd_layer_ms * layers_per_bucket, i)
            grads[b][:] = params[b] * 0.5 + i
            if a.pattern == "allreduce":
                out = np.empty_like(grads[b])
                pending.append((b, out, bg.submit(lambda c, g=grads[b], o=out: c.Allreduce(g, o))))
            else:
                out = np.empty(shard, dtype=np.float32)
                pending.append((b, out, bg.submit(lambda c, g=grads[b], o=out: c.Reduce_scatter_block(g, o))))
        t_compute = time.time()
        for b, out, done in pending:
            done.wait()
        if a.pattern == "allreduce":
            for b, out, _ in pending:
                params[b] -= 1e-3 * out / world
        else:
            # Each rank updates its own shard, then the updated shards are all-gathered, bucket by bucket.
            for b, out, _ in pending:
                mine = params[b][rank * shard:(rank + 1) * shard] - 1e-3 * out / world
                comm.Allgather(np.ascontiguousarray(mine), params[b])
        t_sync = time.time()
        t_step = time.time()
        log.write(json.dumps({"type": "iter", **layout, "iter": i, "start": t_start, "compute_end": t_compute,
                              "sync_end": t_sync, "step_end": t_step, "straggling": slow(i) > 1.0,
                              "overruns": 0, "paused": i == a.pause_at}) + "\n")
    comm.Barrier()
    bg.close()
    log.write(json.dumps({"type": "end", **layout, "time": time.time()}) + "\n")
    log.close()
    MPI.Finalize()


if __name__ == "__main__":
    main()
