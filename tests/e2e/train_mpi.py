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

Pipeline parallelism (--pp P > 1, --dp D, D x P ranks; rank = stage x D + dp_rank, train.py's layout without
TP): each iteration runs --micro-batches micro-batches through the stages (--schedule 1f1b or gpipe): a
stage receives each micro-batch's activations (--act-mb megabytes) from the previous stage's rank of the
same dp_rank (blocking MPI_Recv), computes --fwd-ms (backward: twice that) and sends them on (MPI_Isend);
gradients flow back the same way. After the pipeline drains, a stage with D > 1 all-reduces its gradient
buckets across its DP group (a communicator per stage), bucket after bucket. With D = 1 there is no
synchronisation, and sync_end is the end of the rank's last backward (as train.py).

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
    ap.add_argument("--pp", type=int, default=1, help="pipeline stages (the ranks: dp x pp)")
    ap.add_argument("--micro-batches", type=int, default=4, help="pipeline: micro-batches per iteration")
    ap.add_argument("--schedule", choices=["1f1b", "gpipe"], default="1f1b", help="pipeline schedule")
    ap.add_argument("--act-mb", type=float, default=0.25, help="pipeline: activation megabytes per micro-batch")
    ap.add_argument("--inline-sync", action="store_true",
                    help="run each bucket's collective on the training thread, not the background one (nothing "
                         "to overlap with one bucket; spares a thread hand-off between the wire and sync_end)")
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
def pipeline_step(a, comm, dp, stage, compute, i):
    """One iteration's micro-batches through this rank's stage, 1F1B or GPipe (train.py's schedules)."""
    rank, M = comm.Get_rank(), a.micro_batches
    prev = rank - dp if stage > 0 else None
    nxt = rank + dp if stage < a.pp - 1 else None
    n = max(1, int(a.act_mb * 1e6 / 4))
    act_in, grad_in = np.empty(n, dtype=np.float32), np.empty(n, dtype=np.float32)
    act_out, grad_out = np.full(n, 0.5, dtype=np.float32), np.full(n, 0.25, dtype=np.float32)
    sends = []

    def fwd(m):
        if prev is not None:
            comm.Recv(act_in, source=prev, tag=2 * m)
        compute(a.fwd_ms, i)
        if nxt is not None:
            sends.append(comm.Isend(act_out, dest=nxt, tag=2 * m))

    def bwd(m):
        if nxt is not None:
            comm.Recv(grad_in, source=nxt, tag=2 * m + 1)
        compute(2 * a.fwd_ms, i)
        if prev is not None:
            sends.append(comm.Isend(grad_out, dest=prev, tag=2 * m + 1))

    if a.schedule == "gpipe":
        order = [(fwd, m) for m in range(M)] + [(bwd, m) for m in range(M)]
    else:  # 1F1B: warm-up forwards, then one forward one backward, then the remaining backwards
        warm = min(a.pp - stage - 1, M)
        order = [(fwd, m) for m in range(warm)]
        for k in range(M - warm):
            order += [(fwd, warm + k), (bwd, k)]
        order += [(bwd, k) for k in range(M - warm, M)]
    for step, m in order:
        step(m)
    MPI.Request.Waitall(sends)


def main():
    a = parse()
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    nodes = a.nodes.split(",")
    if len(nodes) != world:
        sys.exit(f"--nodes names {len(nodes)} nodes, the job has {world} ranks")
    if world % a.pp:
        sys.exit(f"{world} ranks cannot form {a.pp} pipeline stages")
    dp = world // a.pp
    stage, dp_rank = rank // dp, rank % dp
    if a.start_delay > 0:
        time.sleep(a.start_delay)
    # The DP group: every rank without pipeline parallelism, else the ranks of this stage.
    dp_comm = comm if a.pp == 1 else comm.Split(stage, rank)
    bg = Background(dp_comm.Dup())

    # Gradient buckets: equal float32 buffers, each a multiple of the DP degree (reduce-scatter shards).
    per_bucket = int(a.grad_mb * 1e6 / 4 / a.buckets) // dp * dp
    params = [np.full(per_bucket, 0.01 * (rank + 1), dtype=np.float32) for _ in range(a.buckets)]
    grads = [np.empty(per_bucket, dtype=np.float32) for _ in range(a.buckets)]
    shard = per_bucket // dp
    layers_per_bucket = max(1, a.layers // a.buckets)

    os.makedirs(a.truth, exist_ok=True)
    log = open(os.path.join(a.truth, f"rank{rank}.jsonl"), "w", buffering=1)
    layout = {"job": a.job, "rank": rank, "node": nodes[rank], "stage": stage, "dp_rank": dp_rank, "tp_rank": 0,
              "dp_group": stage, "pid": os.getpid()}
    log.write(json.dumps({"type": "meta", **layout, "stack": "openmpi", "pattern": a.pattern, "dp": dp,
                          "pp": a.pp, "schedule": a.schedule, "micro_batches": a.micro_batches, "tp": 1, "world": world, "iters": a.iters, "fwd_ms": a.fwd_ms, "layers": a.layers,
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
        pending = []

        def bucket_ready(b):
            grads[b][:] = params[b] * 0.5 + i
            if dp == 1:
                return
            if a.pattern == "allreduce":
                out = np.empty_like(grads[b])
                fn = lambda c, g=grads[b], o=out: c.Allreduce(g, o)  # noqa: E731
            else:
                out = np.empty(shard, dtype=np.float32)
                fn = lambda c, g=grads[b], o=out: c.Reduce_scatter_block(g, o)  # noqa: E731
            pending.append((b, out, fn if a.inline_sync else bg.submit(fn)))

        if a.pp == 1:
            compute(a.fwd_ms, i)  # forward pass
            bwd_layer_ms = 2 * a.fwd_ms / (layers_per_bucket * a.buckets)
            for b in reversed(range(a.buckets)):  # backward: the last layers' gradients are ready first
                compute(bwd_layer_ms * layers_per_bucket, i)
                bucket_ready(b)
        else:  # the stage's gradients are complete once the pipeline drained
            pipeline_step(a, comm, dp, stage, compute, i)
            for b in reversed(range(a.buckets)):
                bucket_ready(b)
        t_compute = time.time()
        for b, out, done in pending:
            if a.inline_sync:  # the collective itself, after the compute
                done(bg.comm)
            else:
                done.wait()
        if a.pattern == "allreduce":
            for b, out, _ in pending:
                params[b] -= 1e-3 * out / dp
        else:
            # Each rank updates its own shard, then the updated shards are all-gathered, bucket by bucket.
            for b, out, _ in pending:
                mine = params[b][dp_rank * shard:(dp_rank + 1) * shard] - 1e-3 * out / dp
                dp_comm.Allgather(np.ascontiguousarray(mine), params[b])
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
