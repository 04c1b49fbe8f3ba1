#!/usr/bin/python3
"""Live scale benchmark (issue 20), run by run_live_scale.sh: a real aggregator, `netprism-sim live` playing
the cluster in real time, this script polling the real query API.

- Rates and sizes: synthetic jobs (sim_model) of 8-512 nodes starting and ending on N nodes, 8 NICs each.
- Accuracy: every testbed recording (tests/e2e/samples/*) and the SimAI sample (tests/data/simai_job_c)
  replayed as COPIES copies on nodes of their own; `exact_jobs` counts the offline jobs (`netprism analyze`
  of the original recording) whose node group and iteration count the live aggregator reports identically.
- visible_p95_s / visible_p99_s: per synthetic iteration (after the first 4 of its job, which the timeline
  cannot place yet), first time its end shows in the job's `timeline` minus its end (the end of its DP sync as
  the analysis places it, matched to the simulator's truth; see Visibility.observe). `jobs` is polled
  every 0.25 s (the iteration count) and a job's `timeline` fetched when its count changed, so the figures
  include up to 0.25 s of polling. Iterations never seen are counted apart (`iterations_missed`).
- shed_events: the analysis' counted drops (`dropped_events`) plus deferred job re-analyses (`deferred_jobs`).
  Extra keys split dropped_events by cause: dropped_queue_full (pending queue from ingest full),
  dropped_conn_table_full (connection table full), dropped_xfer_bound (transfers evicted early at
  analysis_max_events), dropped_undecodable.
- rss_*_half_mb: the aggregator's peak RSS in each half of the run; ack_p99_ms: batch sent -> ACK at the
  virtual agents.
- analysis_cpu_s / aggregator_cpu_s: CPU seconds of the live-analysis thread and of the whole aggregator.
The aggregator runs with --analysis-max-events 8000000 (NP_MAX_EVENTS): the running jobs' tails hold ~1.9 M
transfers (1,250 busy nodes x ~83 records per node and iteration x 18 iterations) and the jobs that ended
within the analysis window as many again, above the 2 M default; at 4 M, 424 k were dropped in 5 minutes
(docs/deploy.md). NP_AGG_ARGS adds aggregator options; NP_SCALE_KEEP_LOG=FILE keeps its log;
NP_SCALE_RSS_TRACE=FILE writes, every second, the aggregator's RSS (MB), the live view's jobs by state, the
heap in use / free / mapped apart (MB, `status`: memory) and the connections, flows and transfers the live
analysis holds.
NP_ANALYSIS_NICE=N renices the aggregator's analysis thread (default: left at the daemon's own nice 10; on a
machine other work loads, a nice-10 thread gets a sliver of a core, see bench/README.md).
usage: live_scale.py BUILD MINUTES NODES JOBS COPIES NICS
"""
import bisect
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "support"))
from nplocal import Query, free_ports  # noqa: E402

WARMUP = 4
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHED_CAUSES = ("queue_full", "conn_table_full", "xfer_bound", "undecodable")  # status: analysis.dropped_by_cause


def recordings():
    out = []
    for d in sorted(glob.glob(os.path.join(ROOT, "tests/e2e/samples/*/"))):
        if os.path.exists(d + "flows.csv.gz"):
            out.append((d + "flows.csv.gz", d + "topology.txt"))
    simai = os.path.join(ROOT, "tests/data/simai_job_c/")
    out.append((simai + "flows.csv", simai + "topology.txt"))
    return out


def offline_jobs(cli, csv, topo):
    doc = json.loads(subprocess.run([cli, "analyze", "--input", csv, "--format", "csv", "--topology", topo, "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    return [(sorted(j["nodes"]), len(j.get("iterations", []))) for j in doc["jobs"]]


def threads(pid, name=None):
    out = []
    for t in glob.glob(f"/proc/{pid}/task/*"):
        try:
            if name is None or open(f"{t}/comm").read().strip() == name:
                out.append(int(os.path.basename(t)))
        except OSError:
            pass
    return out


def cpu_s(pid, tid=None):
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    try:
        f = open(path).read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0


def rss_mb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0


class Visibility:
    """First-seen times of synthetic iterations, matched by end time to the truth."""

    def __init__(self):
        self.truth = {}  # frozenset(nodes) -> {"ends": [...], "step": s, "seen": {index: t}}

    def add_truth(self, rec):
        self.truth[frozenset(rec["nodes"])] = {"ends": rec["ends"], "step": rec["step_s"], "seen": {}}

    def observe(self, nodes, timeline, t):
        # The simulator's truth ends an iteration after its optimizer step (~0.1 step after the DP sync); the
        # analysis places the boundary at the end of the DP sync. A live end within [-0.3, +0.05] step of a
        # true end is that iteration; its latency is counted from the live end (the earlier of the two).
        tr = self.truth.get(frozenset(nodes))
        if not tr:
            return
        ends, step = tr["ends"], tr["step"] * 1e9
        for it in timeline.get("iterations", []):
            e = it["end_ns"]
            k = bisect.bisect_left(ends, e - 0.05 * step)
            if k < len(ends) and ends[k] - e <= 0.3 * step and k not in tr["seen"]:
                tr["seen"][k] = t - e / 1e9

    def node_iterations(self, run_end_ns):
        return sum(len(k) * sum(1 for e in tr["ends"] if e <= run_end_ns) for k, tr in self.truth.items())

    def latencies(self, run_end_ns):
        lat, missed = [], 0
        for tr in self.truth.values():
            for i, e in enumerate(tr["ends"]):
                if i < WARMUP or e > run_end_ns - 10e9:
                    continue
                if i in tr["seen"]:
                    lat.append(tr["seen"][i])
                else:
                    missed += 1
        return sorted(lat), missed


def pct(v, q):
    return round(v[min(len(v) - 1, int(q * len(v)))], 3) if v else None


def main():
    build, minutes, nodes, jobs, copies, nics = sys.argv[1], float(sys.argv[2]), *map(int, sys.argv[3:7])
    cli, agg_bin, sim = (f"{build}/aggregator/netprism", f"{build}/aggregator/netprism-aggregator",
                         f"{build}/bench/scale/netprism-sim")
    work = tempfile.mkdtemp(prefix="np-livescale-")
    ingest, query = (f"tcp://127.0.0.1:{p}" for p in free_ports(2))
    recs = recordings()
    offline = {csv: offline_jobs(cli, csv, topo) for csv, topo in recs}
    extra = os.environ.get("NP_AGG_ARGS", "").split()
    agg = subprocess.Popen([agg_bin, "--listen", ingest, "--query", query, "--data-dir", f"{work}/data", "--insecure",
                            "--analysis-max-events", os.environ.get("NP_MAX_EVENTS", "8000000")] + extra,
                           stdout=open(f"{work}/agg.log", "w"), stderr=subprocess.STDOUT)
    procs = [agg]
    try:
        q = Query(query)
        deadline = time.time() + 30
        while q({"cmd": "status"}) is None:
            if time.time() > deadline:
                raise SystemExit("aggregator did not come up")
        if os.environ.get("NP_ANALYSIS_NICE"):
            time.sleep(1)  # the analysis thread names itself, then lowers its priority
            for tid in threads(agg.pid, "np-analysis"):
                subprocess.run(["renice", "-n", os.environ["NP_ANALYSIS_NICE"], "-p", str(tid)], check=True)
        truth_path = f"{work}/truth.jsonl"
        cmd = [sim, "live", "--aggregator", ingest, "--nodes", str(nodes), "--jobs", str(jobs), "--nics", str(nics),
               "--minutes", str(minutes), "--truth", truth_path]
        for csv, topo in recs:
            cmd += ["--replay", f"{csv}:{topo}:{copies}"]
        simp = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        procs.append(simp)
        return measure(q, agg, simp, truth_path, offline, minutes, nodes, jobs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait()
        if os.environ.get("NP_SCALE_KEEP_LOG"):  # the aggregator's log, kept for a post-mortem
            subprocess.run(["cp", f"{work}/agg.log", os.environ["NP_SCALE_KEEP_LOG"]])
        subprocess.run(["rm", "-rf", work])


def measure(q, agg, simp, truth_path, offline, minutes, nodes, jobs):
    vis, replays = Visibility(), []
    counts, rss, loads, sim_lines = {}, [], [], []
    start = time.time()
    tf, next_rss, partial = None, 0, ""
    trace = open(os.environ["NP_SCALE_RSS_TRACE"], "w", buffering=1) if os.environ.get("NP_SCALE_RSS_TRACE") else None
    os.set_blocking(simp.stdout.fileno(), False)
    while simp.poll() is None:
        now = time.time()
        for line in iter(simp.stdout.readline, ""):
            sim_lines.append(line.strip())
            print(line.strip(), flush=True)
        if tf is None and os.path.exists(truth_path):
            tf = open(truth_path)
        partial += tf.read() if tf else ""
        *lines, partial = partial.split("\n")  # a line being written stays for the next round
        for line in lines:
            if line.strip():
                rec = json.loads(line)
                (vis.add_truth if rec["kind"] == "sim" else replays.append)(rec)
        doc = q({"cmd": "jobs"})
        if now >= next_rss:
            rss.append((now - start, rss_mb(agg.pid)))
            if len(rss) % 10 == 0:
                loads.append(os.getloadavg()[0])
            next_rss = now + 1
            if trace is not None:  # NP_SCALE_RSS_TRACE: RSS beside the live view's jobs by state
                states = collections.Counter(j.get("state", "?") for j in (doc or {}).get("jobs", []))
                st = q({"cmd": "status"}) or {}
                mem, work = st.get("memory", {}), st.get("analysis", {}).get("work", {})
                trace.write(f"{now - start:.0f} {rss[-1][1]:.0f} {sum(states.values())} "
                            + " ".join(f"{k}={v}" for k, v in sorted(states.items()))
                            + f" heap={mem.get('heap_in_use_mb', 0):.0f}/{mem.get('heap_free_mb', 0):.0f}"
                            + f"/{mem.get('mmapped_mb', 0):.0f} conns={work.get('conns')} flows={work.get('flows')}"
                            + f" xfers={work.get('xfers')}/{work.get('xfer_slots')} its={work.get('iterations')} phases={work.get('phases')}\n")
        for j in (doc or {}).get("jobs", []):
            if counts.get(j["id"]) != j["iterations"]:
                counts[j["id"]] = j["iterations"]
                tl = q({"cmd": "timeline", "id": j["id"]})
                if tl:
                    vis.observe(j["nodes"], tl, now)
        time.sleep(max(0, 0.25 - (time.time() - now)))
    for line in simp.stdout.read().splitlines():
        sim_lines.append(line.strip())
        print(line.strip(), flush=True)
    time.sleep(3)  # a last pass or two over the drained data
    cpu = {"analysis_cpu_s": round(sum(cpu_s(agg.pid, t) for t in threads(agg.pid, "np-analysis")), 1),
           "aggregator_cpu_s": round(cpu_s(agg.pid), 1)}
    return report(q, vis, replays, offline, rss, loads, sim_lines, minutes, nodes, jobs, start, cpu)


def report(q, vis, replays, offline, rss, loads, sim_lines, minutes, nodes, jobs, start, cpu):
    status = q({"cmd": "status"}) or {}
    an = status.get("analysis", {})
    # Several live jobs can share a node set (two tenants on the same nodes, a job's start-up connections
    # seen apart): each offline job is matched to one of them, and each live job used once.
    live = {}
    for j in (q({"cmd": "jobs"}) or {}).get("jobs", []):
        live.setdefault(frozenset(j["nodes"]), []).append(j["iterations"])
    exact = checked = 0
    for rec in replays:
        nmap, amap = rec["node_map"], rec["addr_map"]
        for names, its in offline[rec["recording"]]:
            checked += 1
            key = frozenset(nmap.get(n, amap.get(n, n)) for n in names)
            if its in live.get(key, []):
                live[key].remove(its)
                exact += 1
            else:
                print(f"not exact: {rec['recording']} copy {rec['copy']}: offline {its} iterations on {names}, "
                      f"live {live.get(key)}", flush=True)
    done = dict(kv.split("=", 1) for kv in [l for l in sim_lines if l.startswith("live-done:")][-1].split()[1:])
    run_end_ns = (start + minutes * 60) * 1e9
    lat, missed = vis.latencies(run_end_ns)
    ids = {frozenset(j["nodes"]): j["id"] for j in (q({"cmd": "jobs"}) or {}).get("jobs", [])}
    for key, tr in vis.truth.items():  # per synthetic job: found live (same nodes)? iterations seen
        n_true = sum(1 for e in tr["ends"] if e <= run_end_ns)
        line = f"sim job on {len(key)} nodes, step {tr['step']:.2f} s: {n_true} iterations ended, {len(tr['seen'])} seen"
        own = sorted(v for i, v in tr["seen"].items() if i >= WARMUP)
        if own:
            line += f" (visible after {pct(own, 0.5)} s median, {own[-1]:.3f} s at most)"
            slow = sorted((i, v) for i, v in tr["seen"].items() if i >= WARMUP and v > 2)
            if slow:  # which iterations came late: the first after start-up, or some late one every so often
                line += "; after 2 s: " + ", ".join(f"#{i} {v:.2f} s" for i, v in slow[:8])
                if os.environ.get("NP_DEBUG"):
                    line += f" ends {[tr['ends'][i] for i, _ in slow[:3]]} id {ids.get(key)}"
        if key not in live:
            line += "; no live job has exactly its nodes"
        elif not tr["seen"] and os.environ.get("NP_DEBUG"):
            tl = q({"cmd": "timeline", "id": ids[key]}) or {}
            line += f"; live ends {[i['end_ns'] for i in tl.get('iterations', [])[:6]]} truth {tr['ends'][:6]}"
        print(line, flush=True)
    by_cause = an.get("dropped_by_cause", {})
    work = an.get("work", {})
    half = minutes * 60 / 2
    first = [r for t, r in rss if t <= half] or [0]
    second = [r for t, r in rss if t > half] or [0]
    print(f"visibility: {len(lat)} iterations seen, {missed} missed; median {pct(lat, 0.5)} s; "
          f"load average during the run: {', '.join(f'{x:.1f}' for x in loads)}; "
          f"analysis: last pass {an.get('took_ms')} ms, dropped {an.get('dropped_events')} {by_cause}, "
          f"deferred {an.get('deferred_jobs')}", flush=True)
    out = {"nodes": nodes, "jobs": jobs, "minutes": minutes, "records_per_s": float(done["records_per_s"]),
           "visible_p95_s": pct(lat, 0.95), "visible_p99_s": pct(lat, 0.99),
           "shed_events": int(an.get("dropped_events", 0)) + int(an.get("deferred_jobs", 0)),
           "rss_first_half_mb": round(max(first)), "rss_second_half_mb": round(max(second)),
           "ack_p99_ms": float(done["ack_p99_ms"]), "exact_jobs": exact, "jobs_checked": checked,
           "iterations_seen": len(lat), "iterations_missed": missed, "visible_p50_s": pct(lat, 0.5),
           "dropped_events": int(an.get("dropped_events", 0)), "deferred_jobs": int(an.get("deferred_jobs", 0)),
           "records_acked": int(done["records_acked"]), "all_acked": done["all_acked"],
           "records_per_node_iteration": round(int(done["records_sent"]) / max(1, vis.node_iterations(run_end_ns)), 1),
           "load_avg_mean": round(sum(loads) / len(loads), 2) if loads else None,
           "analysis_nice": int(os.environ.get("NP_ANALYSIS_NICE", 10)), **cpu,
           # dropped_events by cause (`status`: analysis.dropped_by_cause): why the live view shed work
           **{f"dropped_{c}": int(by_cause.get(c, 0)) for c in SHED_CAUSES},
           # what the live analysis' passes did (`status`: analysis.work): re-analyses, and the transfers they
           # re-read per event added (the tails' amplification)
           "reanalyses": int(work.get("reanalyses", 0)), "reused": int(work.get("reused", 0)),
           "reanalysed_per_event": round(int(work.get("reanalysed_xfers", 0)) / max(1, int(work.get("events", 0))), 2)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
