#!/usr/bin/python3
"""One rank of a Megatron-style DP x PP x TP training job on gloo, writing its own ground-truth log.

Rank layout (Megatron's order: TP fastest, then DP, then PP):
    rank = stage * (dp * tp) + dp_rank * tp + tp_rank
The TP ranks of one (stage, dp_rank) share a node, so tensor-parallel all-reduces stay on that namespace's
loopback (the NVLink of a real server); node index = rank // tp = stage * dp + dp_rank. Pipeline traffic goes
between the same (dp_rank, tp_rank) of adjacent stages, gradient all-reduce among the same (stage, tp_rank) of
every dp_rank: both cross the bridge.

Model: per stage `depth` Megatron MLP blocks, each a column-parallel (W -> W/tp) and a row-parallel (W/tp -> W)
linear layer; the TP all-reduce follows every row-parallel layer in the forward pass and every column-parallel
layer in the backward pass (Megatron's g and f operators).

Each iteration: micro-batches through the pipeline (GPipe or 1F1B), pipeline sends with isend (blocking gloo
send/recv deadlock under 1F1B because both neighbours can be sending at once), then one all_reduce of the
flattened gradients over the DP group, then an SGD step.

Ground truth (one JSON object per line, truth/rank<R>.jsonl):
  {"type":"meta", ...layout...}
  {"type":"iter","iter":i,"start":t0,"compute_end":t1,"sync_end":t2,"step_end":t3, ...layout...}
  {"type":"hang","iter":i,"time":t}           (just before the rank stops itself with SIGSTOP)
  {"type":"end","time":t}                     (after the process group was destroyed)
Times are time.time() (CLOCK_REALTIME seconds), comparable with netprism's Unix-epoch nanoseconds.
"""
import argparse
import contextlib
import datetime
import json
import os
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--master", required=True, help="ADDR:PORT of rank 0's store")
    ap.add_argument("--node", required=True)
    ap.add_argument("--node-base", type=int, default=0, help="index of this job's first node (several jobs)")
    ap.add_argument("--job", default="job0")
    ap.add_argument("--schedule", choices=["1f1b", "gpipe"], default="1f1b")
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--micro-batch-size", type=int, default=32)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=2, help="MLP blocks per stage")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--truth", required=True, help="directory for rank<R>.jsonl")
    ap.add_argument("--compute", choices=["emulated", "cpu"], default="emulated",
                    help="emulated: a micro-batch's forward takes --fwd-ms (backward twice that) like a GPU kernel: "
                         "the real matmuls run, then the rank waits out the rest without using the CPU; "
                         "cpu: only the real matmuls")
    ap.add_argument("--fwd-ms", type=float, default=30.0, help="emulated forward time of one micro-batch")
    ap.add_argument("--straggler-factor", type=float, default=1.0)
    ap.add_argument("--straggler-from", type=int, default=0)
    ap.add_argument("--pause-at", type=int, default=-1, help="iteration at whose start every rank pauses")
    ap.add_argument("--pause-seconds", type=float, default=0.0)
    ap.add_argument("--eval-at", type=int, default=-1,
                    help="iteration at whose start every rank runs an evaluation phase: --eval-batches forward-only "
                         "micro-batches through the pipeline (no backward, no gradient sync), then an all-reduce "
                         "of the loss over the DP group, as a trainer's periodic validation does")
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--hang-at", type=int, default=-1, help="this rank stops itself (SIGSTOP) at this iteration")
    ap.add_argument("--start-delay", type=float, default=0.0,
                    help="sleep this long after start-up before joining the job (a later job: its Python and "
                         "torch start-up, which loads the 2 cores for seconds, then happens before the other "
                         "job's measured iterations rather than in the middle of them)")
    ap.add_argument("--timeout", type=float, default=900, help="gloo timeout, seconds")
    ap.add_argument("--ddp", action="store_true",
                    help="PyTorch DistributedDataParallel (pp = tp = 1): one gradient bucket per MLP block, each "
                         "all-reduced by DDP as soon as its block's backward is done, overlapping the rest")
    a = ap.parse_args()
    a.world = a.dp * a.pp * a.tp
    if not 0 <= a.rank < a.world:
        ap.error("rank out of range")
    if a.width % a.tp:
        ap.error("width must be divisible by tp")
    if a.ddp and (a.pp != 1 or a.tp != 1):
        ap.error("--ddp trains data-parallel only (pp = tp = 1)")
    return a


class _AllReduceFwd(torch.autograd.Function):
    """Megatron's g: all-reduce in forward, identity in backward (after a row-parallel layer)."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None


class _AllReduceBwd(torch.autograd.Function):
    """Megatron's f: identity in forward, all-reduce of the gradient in backward (before a column-parallel
    layer)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g, group=ctx.group)
        return g, None


class _EmulatedBackward(torch.autograd.Function):
    """--ddp: identity in forward; in backward the emulated GPU computes one block's backward (a wait of
    `seconds`) before that block's gradients are ready, so DDP's bucket hooks fire one block at a time while
    the backward pass goes on, as on a GPU."""

    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        time.sleep(ctx.seconds)
        return g, None


def gpu_wait(until):
    """The emulated GPU is busy until `until` (perf_counter): the host thread waits without computing, as a
    CUDA stream sync would. Sleeping (not spinning) keeps the 2 shared cores free for the other ranks, so each
    rank's time follows its own emulated kernels rather than the CPU scheduler."""
    left = until - time.perf_counter()
    if left > 0:
        time.sleep(left)


def burn(seconds):
    """Busy compute for `seconds` (a slower GPU: the rank keeps computing, it does not sleep)."""
    end = time.perf_counter() + seconds
    a = torch.ones(64, 64)
    while time.perf_counter() < end:
        a = torch.tanh(a @ a * 0.01)


class Stage(torch.nn.Module):
    def __init__(self, a, tp_group):
        super().__init__()
        self.tp_group = tp_group if a.tp > 1 else None
        self.block_bwd_s = 0.0  # --ddp: emulated backward seconds per block (set every iteration)
        w, h = a.width, a.width // a.tp
        g = torch.Generator().manual_seed(1234 + a.rank)
        self.A = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(w, h, generator=g) / w**0.5) for _ in range(a.depth)])
        self.B = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(h, w, generator=g) / h**0.5) for _ in range(a.depth)])

    def forward(self, x):
        for A, B in zip(self.A, self.B):
            y = _AllReduceBwd.apply(x, self.tp_group) if self.tp_group else x
            y = torch.tanh(y @ A) @ B
            y = _AllReduceFwd.apply(y, self.tp_group) if self.tp_group else y
            x = x + 0.5 * torch.tanh(y)
            if self.block_bwd_s > 0:
                x = _EmulatedBackward.apply(x, self.block_bwd_s)
        return x


def main():
    a = parse()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    dptp = a.dp * a.tp
    stage, dp_rank, tp_rank = a.rank // dptp, (a.rank % dptp) // a.tp, a.rank % a.tp
    addr, port = a.master.rsplit(":", 1)
    time.sleep(a.start_delay)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.timeout))
    # Every rank creates every group, in the same order (a torch.distributed requirement).
    tp_group = dp_group = None
    for s in range(a.pp):
        for d in range(a.dp):
            ranks = [s * dptp + d * a.tp + t for t in range(a.tp)]
            g = dist.new_group(ranks) if a.tp > 1 else None
            if a.rank in ranks:
                tp_group = g
    for s in range(a.pp):
        for t in range(a.tp):
            ranks = [s * dptp + d * a.tp + t for d in range(a.dp)]
            g = dist.new_group(ranks) if a.dp > 1 else None
            if a.rank in ranks:
                dp_group = g
    prev_rank = a.rank - dptp if stage > 0 else None
    next_rank = a.rank + dptp if stage < a.pp - 1 else None

    model = Stage(a, tp_group)
    params = list(model.parameters())
    stage_model = model
    if a.ddp and dp_group is not None:
        # One bucket per block: a block's two matrices (width x width floats each).
        block_mb = 2 * a.width * a.width * 4 / 2**20
        model = torch.nn.parallel.DistributedDataParallel(model, process_group=dp_group, bucket_cap_mb=block_mb)
    torch.manual_seed(99 + dp_rank)  # same data for the TP ranks of one replica
    M, mbs, W = a.micro_batches, a.micro_batch_size, a.width

    os.makedirs(a.truth, exist_ok=True)
    log = open(os.path.join(a.truth, f"rank{a.rank}.jsonl"), "w", buffering=1)
    layout = {"job": a.job, "rank": a.rank, "node": a.node, "stage": stage, "dp_rank": dp_rank,
              "tp_rank": tp_rank, "dp_group": stage * a.tp + tp_rank, "pid": os.getpid()}
    log.write(json.dumps({"type": "meta", **layout, "dp": a.dp, "pp": a.pp, "tp": a.tp, "world": a.world,
                          "schedule": a.schedule, "micro_batches": M, "micro_batch_size": mbs, "width": W,
                          "depth": a.depth, "iters": a.iters, "compute": a.compute, "fwd_ms": a.fwd_ms, "host": socket.gethostname(),
                          "straggler_factor": a.straggler_factor, "straggler_from": a.straggler_from,
                          "pause_at": a.pause_at, "pause_seconds": a.pause_seconds, "hang_at": a.hang_at,
                          "eval_at": a.eval_at, "eval_batches": a.eval_batches})
              + "\n")
    dist.barrier()

    straggling = lambda i: a.straggler_factor > 1.0 and i >= a.straggler_from
    overruns = [0]

    def finish(i, t0, ms):
        """End one micro-batch's forward or backward that started at t0 (perf_counter).
        emulated: it lasts ms (times the straggler factor: the slow GPU); cpu: the real compute, plus busy
        compute of (factor - 1) times its duration for a straggler."""
        if a.compute == "emulated":
            target = ms / 1000.0 * (a.straggler_factor if straggling(i) else 1.0)
            if time.perf_counter() - t0 > target:
                overruns[0] += 1  # the real matmuls took longer than the emulated kernel: CPU-bound
            gpu_wait(t0 + target)
        elif straggling(i):
            burn((time.perf_counter() - t0) * (a.straggler_factor - 1.0))

    def evaluate(i):
        """Validation: forward-only micro-batches through the pipeline, then the mean loss over the DP group."""
        loss = torch.zeros(1)
        with torch.no_grad():
            for m in range(a.eval_batches):
                t0 = time.perf_counter()
                x = torch.randn(mbs, W)
                if prev_rank is not None:
                    dist.recv(x, src=prev_rank, tag=1000 + m)
                t0 = time.perf_counter()
                y = stage_model(x)
                finish(-1, t0, a.fwd_ms)
                if next_rank is not None:
                    dist.send(y, dst=next_rank, tag=1000 + m)
                loss += y.square().mean()
        if dp_group is not None:
            dist.all_reduce(loss, group=dp_group)

    for i in range(a.iters):
        t_start = time.time()
        if i == a.hang_at:
            log.write(json.dumps({"type": "hang", **layout, "iter": i, "time": time.time()}) + "\n")
            log.flush()
            os.kill(os.getpid(), signal.SIGSTOP)
        if i == a.pause_at:
            time.sleep(a.pause_seconds)
        if i == a.eval_at:
            evaluate(i)
        sends, inputs, outputs = [], [None] * M, [None] * M

        def fwd(m):
            t0 = time.perf_counter()
            if prev_rank is None:
                x = torch.randn(mbs, W)
            else:
                x = torch.empty(mbs, W)
                dist.irecv(x, src=prev_rank, tag=2 * m).wait()
                x.requires_grad_(True)
            t0 = time.perf_counter()
            # DDP synchronises on the last micro-batch only: the earlier ones' forward and backward run under
            # no_sync (gradient accumulation, as DDP requires: the forward decides whether the backward syncs).
            with model.no_sync() if a.ddp and dp_group is not None and m < M - 1 else contextlib.nullcontext():
                y = model(x)
            inputs[m], outputs[m] = x, y
            finish(i, t0, a.fwd_ms)
            if next_rank is not None:
                out = y.detach()
                sends.append((dist.isend(out, dst=next_rank, tag=2 * m), out))

        if a.ddp:
            stage_model.block_bwd_s = 2 * a.fwd_ms / 1000.0 / a.depth * (a.straggler_factor if straggling(i) else 1.0)

        def bwd(m):
            y = outputs[m]
            if next_rank is None:
                t0 = time.perf_counter()
                loss = torch.nn.functional.mse_loss(y, torch.zeros_like(y))
                loss.backward()
            else:
                g = torch.empty(mbs, W)
                dist.irecv(g, src=next_rank, tag=2 * m + 1).wait()
                t0 = time.perf_counter()
                torch.autograd.backward(y, g)
            if not a.ddp:  # --ddp: the backward's emulated compute ran inside autograd
                finish(i, t0, 2 * a.fwd_ms)
            if prev_rank is not None:
                gx = inputs[m].grad
                sends.append((dist.isend(gx, dst=prev_rank, tag=2 * m + 1), gx))
            inputs[m] = outputs[m] = None

        if a.schedule == "gpipe":
            for m in range(M):
                fwd(m)
            for m in range(M):
                bwd(m)
        else:  # 1F1B: warm-up forwards, steady one-forward-one-backward, cool-down backwards
            warm = min(a.pp - stage - 1, M)
            for m in range(warm):
                fwd(m)
            for k in range(M - warm):
                fwd(warm + k)
                bwd(k)
            for k in range(M - warm, M):
                bwd(k)
        for h, _ in sends:
            h.wait()
        t_compute = time.time()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        if dp_group is not None and not a.ddp:  # DDP averaged the gradients during the backward pass
            dist.all_reduce(flat, group=dp_group)
            flat /= a.dp
        t_sync = time.time()
        with torch.no_grad():
            off = 0
            for p in params:
                n = p.numel()
                p -= 1e-3 * flat[off:off + n].view_as(p)
                p.grad = None
                off += n
        t_step = time.time()
        log.write(json.dumps({"type": "iter", **layout, "iter": i, "start": t_start, "compute_end": t_compute,
                              "sync_end": t_sync, "step_end": t_step,
                              "straggling": straggling(i), "overruns": overruns[0],
                              "paused": i == a.pause_at}) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    log.write(json.dumps({"type": "end", **layout, "time": time.time()}) + "\n")
    log.close()
    # Leave without the interpreter's and torch's finalisation: it costs about a second of CPU per process,
    # which would slow a job still running on the 2 shared cores. The kernel closes the sockets (FIN) at once.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
