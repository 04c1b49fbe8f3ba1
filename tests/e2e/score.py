#!/usr/bin/python3
"""Score netprism's view of a testbed run against the run's ground truth.

Inputs: a run directory written by `testbed.py run` (run.json, truth/<job>/rank<R>.jsonl, flows.csv,
topology.txt) and netprism's answer, one of
  --json FILE        a document shaped like `netprism analyze --json` ({"jobs": [ {...} ]})
  --netprism PATH    run `PATH analyze --input DIR/flows.csv --format csv --topology DIR/topology.txt --json`
  --live ENDPOINT    ask a running aggregator: `netprism jobs/job/timeline/diagnose --json` (with --netprism PATH)
  --self             netprism's answer replaced by the truth itself (checks the scorer: every error is zero)

THE ITERATION BOUNDARY. Iteration i of the truth ends at B_i = the end of its last DP synchronisation:
for every DP group (the ranks of one stage and TP rank that all-reduce their gradients together) the median
over its members of `sync_end`, the instant a rank's all-reduce returned; then the latest of these over the
groups. Why this instant: the members of one all-reduce pass its end together (it cannot complete on one
before every member joined), so they agree on it up to scheduling noise, and the median makes one descheduled
rank irrelevant; different pipeline stages synchronise at different times (in 1F1B and GPipe the last stage
finishes its backward passes, and its all-reduce, tens of ms before the first stage), and the iteration is
over, as far as the job can tell, when the last of them is. It is also what the network shows: the DP
synchronisation is the last burst of every iteration, and contracts.md puts netprism's boundaries at its end.
With dp = 1 there is no all-reduce and `sync_end` is the end of each rank's compute, so B_i is when the last
stage-group finished its last backward pass. Truth iteration i >= 1 spans [B_{i-1}, B_i]; iteration 0
starts at the median start of iteration 0 (the job's first step has no preceding synchronisation), so it is
matched when netprism reports it but its duration is not scored. Only iterations that every rank finished
count (a hung job's last iterations are incomplete).

TRUTH NOISE. Two ranks that finish the same DP synchronisation should see the same iteration duration;
they disagree by scheduling noise. For every iteration and DP group, each member's own duration
d_i(r) = sync_end_i(r) - sync_end_{i-1}(r) is compared with the group's median, relative to the iteration's
duration d_i = B_i - B_{i-1}; the distribution over members and iterations is the truth's own noise, printed
beside netprism's error: netprism cannot be judged more precisely than the truth agrees with itself. (Different
DP groups legitimately finish at different times, so they are not compared with each other.) Without data
parallelism (dp = 1) there is no shared synchronisation, and all ranks of the job form the one group.

MATCHING BY TIME, NOT INDEX. netprism's index 0 is simply the first iteration it saw. Each netprism boundary
(the end of each iteration, and the start of its first) is matched to the nearest truth boundary if it is within
a quarter of the median truth step (further away it is not the same synchronisation). A netprism iteration
whose start and end match B_{j-1} and B_j is truth iteration j; one whose boundaries match non-adjacent truth
boundaries merged iterations and one with an unmatched boundary split one: both count as extra, and truth
iterations without a netprism iteration count as missing.

FINDINGS. Expected per injected fault: straggler -> kind straggler, subject the node; slowlink -> kind
slow_link, subject naming the node (A->B or A<->B); hang -> kind hang, subject the job id or the node, and job
state "hung". A benign pause and a normal end expect no finding; a normal end expects state "ended". A
slow_iteration finding inside a pause's iteration or after a fault began is "explained" (reported, not counted);
any other finding is a false positive. Each matched finding is placed by its start_ns in the truth's iterations
and compared with the iteration in which the fault began (--max-finding-delay).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def pct(xs, q):
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


# --- truth -------------------------------------------------------------------------------------------------
class TruthJob:
    def __init__(self, spec, recs, faults):
        self.name = spec["name"]
        self.spec = spec
        self.nodes = list(spec["nodes"])
        # A fabric fault (testbed --fabric) concerns every job whose traffic crosses the link or leaf.
        self.faults = [f for f in faults if f["job"] == self.name or fabric_crossed(f, self.name)]
        dp, pp, tp = spec["dp"], spec["pp"], spec["tp"]
        self.world = dp * pp * tp
        iters = {}  # iter -> rank -> record
        self.hang = None
        self.ended = 0
        for r in recs:
            if r.get("job") != self.name:
                continue
            if r["type"] == "iter":
                iters.setdefault(r["iter"], {})[r["rank"]] = r
            elif r["type"] == "hang":
                self.hang = r
            elif r["type"] == "end":
                self.ended += 1
        self.complete = []
        for i in sorted(iters):
            if len(iters[i]) == self.world and (not self.complete or i == self.complete[-1] + 1):
                self.complete.append(i)
        self.iters = iters
        self.bound = {i: self.boundary(iters[i]) for i in self.complete}
        # Each DP group's own boundary series (median sync_end of its members), an alternative reading of
        # "the end of the DP synchronisation" when stages synchronise at different times (see match_series).
        self.group_bound = {}
        for i in self.complete:
            groups = {}
            for r in iters[i].values():
                groups.setdefault(r["dp_group"], []).append(r["sync_end"])
            for g, v in groups.items():
                self.group_bound.setdefault(g, {})[i] = statistics.median(v)
        if self.complete and self.complete[0] == 0:
            self.bound[-1] = statistics.median(r["start"] for r in iters[0].values())
        self.durations = {i: self.bound[i] - self.bound[i - 1] for i in self.complete if i - 1 in self.bound}
        # Noise (see the module comment): members of one DP group against their group's median duration;
        # without data parallelism (dp = 1) every rank of the job against the median over all its ranks.
        self.noise = []
        for i in self.complete:
            if i - 1 < 0 or i - 1 not in iters or i not in self.durations:
                continue
            own = {rk: rec["sync_end"] - iters[i - 1][rk]["sync_end"] for rk, rec in iters[i].items()
                   if rk in iters[i - 1]}
            groups = {}
            for rk, d in own.items():
                groups.setdefault(iters[i][rk]["dp_group"] if dp > 1 else 0, []).append(d)
            for ds in groups.values():
                ref = statistics.median(ds)
                self.noise += [abs(d - ref) / self.durations[i] for d in ds]
        self.step = statistics.median(self.durations.values()) if self.durations else None

    @staticmethod
    def boundary(ranks):
        """B_i from one iteration's records of every rank: latest over DP groups of the group's median
        sync_end (see the module comment)."""
        groups = {}
        for r in ranks.values():
            groups.setdefault(r["dp_group"], []).append(r["sync_end"])
        return max(statistics.median(v) for v in groups.values())

    def expected_parallelism(self):
        """Node layout of the testbed: node index = stage * dp + dp_rank (the TP ranks of a node share it); with
        tp_nodes (TP across servers) node index = rank = stage * dp * tp + dp_rank * tp + tp_rank, a DP group
        is the nodes of one (stage, tp_rank) and a TP group those of one (stage, dp_rank)."""
        dp, pp = self.spec["dp"], self.spec["pp"]
        if self.spec.get("tp_nodes"):
            tp = self.spec["tp"]
            node = lambda s, d, t: self.nodes[s * dp * tp + d * tp + t]
            stages = [[node(s, d, t) for d in range(dp) for t in range(tp)] for s in range(pp)]
            groups = [[node(s, d, t) for d in range(dp)] for s in range(pp) for t in range(tp)] if dp > 1 else []
            tp_groups = [[node(s, d, t) for t in range(tp)] for s in range(pp) for d in range(dp)]
            return {"dp": dp, "pp": pp, "stages": stages, "dp_groups": groups, "tp": tp, "tp_groups": tp_groups}
        stages = [[self.nodes[s * dp + d] for d in range(dp)] for s in range(pp)]
        groups = stages if dp > 1 else []
        return {"dp": dp, "pp": pp, "stages": stages, "dp_groups": groups}

    def iteration_start(self, k):
        """Wall time (s) at which iteration k began: the previous boundary."""
        return self.bound.get(k - 1, self.bound.get(-1))

    def iteration_at(self, x):
        """The truth iteration running at wall time x (s): the j with B_{j-1} <= x < B_j; None if outside."""
        js = sorted(i for i in self.bound if i >= 0)
        for j in js:
            if self.bound.get(j - 1, float("-inf")) <= x < self.bound[j]:
                return j
        return js[-1] + 1 if js and x >= self.bound[js[-1]] else None

    def fault_iteration(self, f):
        """The truth iteration in which a fault began."""
        if f["kind"] == "straggler":
            return f["from"]
        if f["kind"] in ("hang", "pause"):
            return f["at"]
        return self.iteration_at(fault_time(self, f))

    def expected_state(self):
        return "hung" if any(f["kind"] == "hang" for f in self.faults) else "ended"

    def as_netprism(self):
        """The truth rendered as a netprism analyze entry (for --self)."""
        its = []
        for n, i in enumerate([i for i in self.complete if i - 1 in self.bound]):
            s, e = int(self.bound[i - 1] * 1e9), int(self.bound[i] * 1e9)
            its.append({"index": n, "start_ns": s, "end_ns": e, "duration_ns": e - s})
        findings = []
        for f in self.faults:
            kind = {"straggler": "straggler", "slowlink": "slow_link", "hang": "hang"}.get(f["kind"])
            if kind:
                subject = f["node"] if kind != "slow_link" else f"{f['node']}<->?"
                findings.append({"kind": kind, "subject": subject, "first_iteration": 0,
                                 "start_ns": int(fault_time(self, f) * 1e9), "severity": 1.0, "evidence": "truth"})
        return {"id": self.name, "nodes": self.nodes, "state": self.expected_state(), "iterations": its,
                "parallelism": self.expected_parallelism(), "findings": findings,
                "step_time_ms": (self.step or 0) * 1e3}


FABRIC_FAULTS = ("fabriclink", "leafuplinks")


def fabric_crossed(f, job):
    if f["kind"] not in FABRIC_FAULTS:
        return False
    links = [k for k in f.get("crossing", {}) if k.startswith(f["leaf"] + "<->") and (
        f["kind"] == "leafuplinks" or k == f"{f['leaf']}<->{f['spine']}")]
    return any(job in f["crossing"][k] for k in links)


def fabric_subject(f):
    return f"{f['leaf']}<->{f['spine']}" if f["kind"] == "fabriclink" else f["leaf"]


def fault_time(tj, f):
    """When the fault began, in wall seconds."""
    if f["kind"] == "straggler":
        return tj.iteration_start(f["from"]) or 0
    if f["kind"] in ("slowlink",) + FABRIC_FAULTS:
        return f.get("applied_at", 0)
    if f["kind"] == "hang":
        return tj.hang["time"] if tj.hang else f.get("stopped_at", 0)
    if f["kind"] == "pause":
        return tj.iteration_start(f["at"]) or 0
    return 0


def load_truth(run_dir):
    with open(os.path.join(run_dir, "run.json")) as f:
        manifest = json.load(f)
    recs = []
    tdir = os.path.join(run_dir, "truth")
    for root, _, files in os.walk(tdir):
        for fn in sorted(files):
            if fn.endswith(".jsonl"):
                with open(os.path.join(root, fn)) as fh:
                    for line in fh:
                        try:
                            recs.append(json.loads(line))
                        except json.JSONDecodeError:
                            pass  # a line cut by a kill
    return manifest, [TruthJob(j, recs, manifest.get("faults", [])) for j in manifest["jobs"]]


# --- netprism's answer ---------------------------------------------------------------------------------------
def run_cli(netprism, args):
    r = subprocess.run([netprism] + args, text=True, capture_output=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{netprism} {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def from_analyze(netprism, run_dir):
    csv_path = os.path.join(run_dir, "flows.csv")
    tmp = None
    if not os.path.exists(csv_path) and os.path.exists(csv_path + ".gz"):  # committed samples are gzipped
        import gzip
        import tempfile
        tmp = tempfile.NamedTemporaryFile(suffix=".csv", delete=False)
        with gzip.open(csv_path + ".gz", "rb") as src:
            tmp.write(src.read())
        tmp.close()
        csv_path = tmp.name
    try:
        return run_cli(netprism, ["analyze", "--input", csv_path, "--format", "csv", "--topology",
                                  os.path.join(run_dir, "topology.txt"), "--json"])
    finally:
        if tmp:
            os.unlink(tmp.name)


def from_live(netprism, endpoint):
    base = ["--aggregator", endpoint]
    jobs = []
    for j in run_cli(netprism, base + ["jobs", "--json"])["jobs"]:
        d = dict(j)
        d["parallelism"] = run_cli(netprism, base + ["job", j["id"], "--json"]).get("parallelism", {})
        d["iterations"] = run_cli(netprism, base + ["timeline", j["id"], "--json"]).get("iterations", [])
        d["findings"] = run_cli(netprism, base + ["diagnose", j["id"], "--json"]).get("findings", [])
        jobs.append(d)
    return {"jobs": jobs}


# --- comparison ----------------------------------------------------------------------------------------------
def match_jobs(truth, npjobs):
    """Each truth job -> the netprism job sharing most nodes (Jaccard), each netprism job used once. Tenants
    on the same nodes tie on nodes: then the netprism job whose iterations match more of the truth job's."""
    pairs, used = {}, set()
    cands = []
    for t in truth:
        for k, j in enumerate(npjobs):
            a, b = set(t.nodes), set(j.get("nodes", []))
            if a & b:
                matched = score_timeline_best(t, j.get("iterations", []))["matched"]
                cands.append((len(a & b) / len(a | b), matched, t.name, k))
    for score, _, tname, k in sorted(cands, reverse=True):
        if tname not in pairs and k not in used:
            pairs[tname] = k
            used.add(k)
    return pairs, [k for k in range(len(npjobs)) if k not in used]


def series(t, name):
    """(boundaries, durations) of one boundary series of the truth: "last" (B_i) or a DP group id."""
    if name == "last":
        return t.bound, t.durations
    b = dict(t.group_bound[name])
    if -1 in t.bound:
        b[-1] = t.bound[-1]
    return b, {i: b[i] - b[i - 1] for i in b if i >= 1 and i - 1 in b}


def score_timeline_best(t, its, grace=0):
    """B_i (the end of the iteration's last DP synchronisation) is the reference. When the stages' DP groups
    synchronise at clearly different times (a slow link inside one stage's group, PP-only jobs), netprism may
    consistently place its boundary at another group's synchronisation end, which is just as much "the end of
    the DP synchronisation" in contracts.md's sense; each group's own series is then tried too, and the one
    that matches most netprism iterations (then the smallest offsets) is scored, and named in the table."""
    best = None
    for name in ["last"] + sorted(t.group_bound, key=str):
        r = score_timeline(t, its, grace, name)
        key = (r["matched"] - r["extra"], -(pct([abs(o) for o in r["offsets"]], .5) or 0))
        if best is None or key > best[0]:
            best = (key, r)
    return best[1]


def score_timeline(t, its, grace=0, which="last"):
    """Match netprism iterations to truth iterations by time. Returns a dict of results.
    grace: truth iterations 1..grace (the first ones a black-box observer may still be locking on to) do not
    count as missing, and netprism iterations ending before B_grace do not count as extra. netprism
    iterations starting at or after the last complete truth boundary (a hung job's stalled iteration, an
    observer's open last one) have no truth to be compared with: counted apart as "after_end"."""
    bound, durations = series(t, which)
    res = {"truth_iterations": len([i for i in t.complete if i >= 1]), "netprism_iterations": len(its),
           "series": "last DP sync" if which == "last" else f"DP group {which}"}
    if not t.step or not its:
        res.update({"matched": 0, "missing": len([i for i in t.complete if i > grace]), "extra": len(its),
                    "errors": [], "offsets": [], "after_end": 0,
                    "missing_iters": [i for i in t.complete if i > grace]})
        return res
    tol = 0.25 * t.step
    bounds = sorted((v, i) for i, v in bound.items())

    def nearest(ns):
        x = ns / 1e9
        v, i = min(bounds, key=lambda b: abs(b[0] - x))
        return (i, x - v) if abs(x - v) <= tol else (None, x - v)

    matched, extra, errors, offsets, seen, after_end = 0, 0, [], [], set(), 0
    last = max(bound.values())
    first_counted = bound.get(grace, min(bound.values()))
    for it in sorted(its, key=lambda x: x["start_ns"]):
        if it["start_ns"] / 1e9 >= last - tol:
            after_end += 1
            continue
        si, so = nearest(it["start_ns"])
        ei, eo = nearest(it["end_ns"])
        if si is not None and ei is not None and ei == si + 1 and ei not in seen:
            seen.add(ei)
            offsets.append(eo)
            if ei >= 1:
                matched += 1
                d = durations[ei]
                errors.append((abs(it["duration_ns"] / 1e9 - d) / d, abs(it["duration_ns"] / 1e9 - d), ei))
        elif it["end_ns"] / 1e9 > first_counted + tol:
            extra += 1
    missing = sorted(i for i in t.complete if i > grace and i not in seen)
    res.update({"matched": matched, "missing": len(missing), "extra": extra, "after_end": after_end,
                "errors": errors, "offsets": offsets, "missing_iters": missing})
    return res


def node_of_subject(subject):
    for sep in ("<->", "->"):
        if sep in subject:
            return subject.split(sep)
    return [subject]


def score_findings(t, job, npjob):
    expected = [f for f in t.faults if f["kind"] in ("straggler", "slowlink", "hang") + FABRIC_FAULTS]
    findings = list(npjob.get("findings", [])) if npjob else []
    rows, used = [], set()
    for f in expected:
        kind = {"straggler": "straggler", "slowlink": "slow_link", "hang": "hang", "fabriclink": "fabric",
                "leafuplinks": "fabric"}[f["kind"]]
        want = fabric_subject(f) if kind == "fabric" else f["node"]
        t0 = fault_time(t, f)
        hit = None
        for k, fd in enumerate(findings):
            if k in used or fd.get("kind") != kind:
                continue
            subj = fd.get("subject", "")
            ok = (subj == want if kind in ("straggler", "fabric") else
                  f["node"] in node_of_subject(subj) if kind == "slow_link" else
                  subj in (f["node"], npjob.get("id")))
            if ok:
                hit = k
                break
        wrong = None
        if hit is None:  # right kind, wrong subject; or right subject, wrong kind
            wrong = next((fd for k, fd in enumerate(findings) if k not in used and (
                fd.get("kind") == kind or want in node_of_subject(fd.get("subject", "")))), None)
            if wrong is not None:
                used.add(findings.index(wrong))
        else:
            used.add(hit)
        fd = findings[hit] if hit is not None else None
        rows.append({"fault": describe_fault(f), "expected": f"{kind} {want}",
                     "found": f"{fd['kind']} {fd['subject']}" if fd else (
                         f"WRONG: {wrong.get('kind')} {wrong.get('subject')}" if wrong else "MISSING"),
                     "ok": fd is not None, "fault_iteration": t.fault_iteration(f),
                     "found_iteration": t.iteration_at(fd["start_ns"] / 1e9) if fd and fd.get("start_ns") else None,
                     "latency_s": (fd["start_ns"] / 1e9 - t0) if fd and fd.get("start_ns") else None})
    false_pos, tolerated = [], []
    for k, fd in enumerate(findings):
        if k in used:
            continue
        # The slow directions a fabric fault explains are the job's slow_link findings (named with it).
        fabric = fd.get("kind") == "slow_link" and any(f["kind"] in FABRIC_FAULTS for f in expected)
        (tolerated if fabric or slow_iteration_explained(t, fd) else false_pos).append(fd)
    return rows, false_pos, tolerated


def slow_iteration_explained(t, fd):
    """A `slow_iteration` finding is not a false positive when the truth explains it: it starts in a benign
    pause's iteration (+-1), or after a straggler, slow link or hang began (-1: the finding may date the change
    one iteration early), or the truth shows that iteration itself 25 % above the median step. Issue 8 asks only that a pause raise no straggler/slow_link, and zero findings from
    healthy runs; a healthy run has no fault, so nothing is tolerated there."""
    if fd.get("kind") != "slow_iteration" or not fd.get("start_ns"):
        return False
    it = t.iteration_at(fd["start_ns"] / 1e9)
    if it is None:
        return False
    # The truth itself says the iteration was slow (a CPU hiccup of the shared 2-core machine): 25 % above the
    # job's median step is far outside the truth's own noise (p95 ~1-3 %), so flagging it is right.
    if t.step and t.durations.get(it, 0) > 1.25 * t.step:
        return True
    for f in t.faults:
        k = t.fault_iteration(f)
        if k is None:
            continue
        if f["kind"] == "pause" and abs(it - k) <= 1:
            return True
        if f["kind"] in ("straggler", "slowlink", "hang") and it >= k - 1:
            return True
    return False


def describe_fault(f):
    keys = [k for k in ("node", "leaf", "spine", "factor", "rate", "from", "at", "seconds", "hold") if k in f]
    return f["kind"] + ":" + ",".join(f"{k}={f[k]}" for k in keys)


def fmt_pct(x):
    return "-" if x is None else f"{100 * x:.2f}%"


def fmt_ms(x):
    return "-" if x is None else f"{1e3 * x:.1f}ms"


def score(manifest, truth, doc, out=sys.stdout, grace=0):
    npjobs = doc.get("jobs", [])
    pairs, unmatched = match_jobs(truth, npjobs)
    p = lambda *a: print(*a, file=out)
    result = {"jobs": [], "extra_jobs": [npjobs[k].get("id") for k in unmatched], "structural_ok": True}
    p(f"run {manifest.get('run_id', '?')}: {len(truth)} truth job(s), {len(npjobs)} netprism job(s)"
      + (f", extra: {result['extra_jobs']}" if unmatched else ""))
    if unmatched:
        result["structural_ok"] = False
    for t in truth:
        j = npjobs[pairs[t.name]] if t.name in pairs else None
        r = {"truth_job": t.name, "netprism_job": j.get("id") if j else None}
        exp = t.expected_parallelism()
        par = (j or {}).get("parallelism", {})
        rows = []

        def check(what, want, got, ok=None):
            ok = (want == got) if ok is None else ok
            rows.append((what, str(want), str(got), "ok" if ok else "MISMATCH"))
            return ok

        s_ok = True
        s_ok &= check("job nodes", sorted(t.nodes), sorted(j.get("nodes", [])) if j else None)
        s_ok &= check("dp", exp["dp"], par.get("dp"))
        s_ok &= check("pp", exp["pp"], par.get("pp"))
        s_ok &= check("stages (ordered)", exp["stages"], [sorted(s) for s in par.get("stages", [])],
                      [sorted(s) for s in exp["stages"]] == [sorted(s) for s in par.get("stages", [])])
        want_g = sorted(sorted(g) for g in exp["dp_groups"])
        got_g = sorted(sorted(g) for g in par.get("dp_groups", []))
        s_ok &= check("dp_groups", want_g, got_g)
        if "tp_groups" in exp:  # TP across servers: the TP groups seen on the network
            s_ok &= check("tp", exp["tp"], par.get("tp"))
            s_ok &= check("tp_groups", sorted(sorted(g) for g in exp["tp_groups"]),
                          sorted(sorted(g) for g in par.get("tp_groups", [])))
        s_ok &= check("state", t.expected_state(), j.get("state") if j else None)
        tl = score_timeline_best(t, (j or {}).get("iterations", []), grace)
        errs = [e[0] for e in tl["errors"]]
        abs_errs = [e[1] for e in tl["errors"]]
        frows, false_pos, tolerated = score_findings(t, j, j)
        f_ok = all(fr["ok"] for fr in frows) and not false_pos
        p("")
        p(f"== {t.name} (dp={t.spec['dp']} pp={t.spec['pp']} tp={t.spec['tp']} {t.spec['schedule']}, "
          f"{len(t.nodes)} nodes) vs netprism job {r['netprism_job']}")
        w = max(len(x[0]) for x in rows)
        for what, want, got, verdict in rows:
            p(f"  {what:<{w}}  truth {want:<40} netprism {got:<40} {verdict}")
        p(f"  iterations   truth {tl['truth_iterations']} (step median {fmt_ms(t.step)}), netprism "
          f"{tl['netprism_iterations']}, matched {tl['matched']}, missing {tl['missing']}"
          f"{' ' + str(tl.get('missing_iters')) if tl['missing'] else ''}, extra {tl['extra']}, after end "
          f"{tl['after_end']} (grace: first {grace}; boundaries: {tl['series']})")
        p(f"  duration error   median {fmt_pct(pct(errs, .5))} ({fmt_ms(pct(abs_errs, .5))})  p95 "
          f"{fmt_pct(pct(errs, .95))} ({fmt_ms(pct(abs_errs, .95))})  max {fmt_pct(max(errs) if errs else None)}")
        p(f"  truth noise      median {fmt_pct(pct(t.noise, .5))}  p95 {fmt_pct(pct(t.noise, .95))}  max "
          f"{fmt_pct(max(t.noise) if t.noise else None)}   (ranks of one DP sync disagreeing on the duration)")
        offs = tl["offsets"]
        p(f"  boundary offset  median {fmt_ms(pct(offs, .5))}  p95 |offset| "
          f"{fmt_ms(pct([abs(o) for o in offs], .95))}   (netprism end - truth boundary)")
        if not frows and not false_pos and not tolerated:
            p("  findings         none expected, none reported: ok")
        for fr in frows:
            lat = "" if fr["latency_s"] is None else (
                f" (start {fr['latency_s']:+.2f}s, iteration {fr['found_iteration']} vs {fr['fault_iteration']})")
            p(f"  finding          {fr['fault']:<34} expect {fr['expected']:<22} got {fr['found']}{lat}")
        for fd in false_pos:
            p(f"  false positive   {fd.get('kind')} {fd.get('subject')} (iteration {fd.get('first_iteration')}):"
              f" {str(fd.get('evidence', ''))[:80]}")
        hang_t = t.hang["time"] if t.hang else None
        if hang_t and j and doc.get("events"):
            seen = [e["time"] for e in doc["events"] if e["what"][:3] == ["state", j.get("id"), "hung"]]
            bound = max(3 * (t.step or 0), 2.0) + 2.0
            lat = (min(seen) - hang_t) if seen else None
            r["hang_report_latency_s"] = lat
            p("  hang reported    " + (f"{lat:.2f}s after the rank stopped (bound max(3 x step, 2 s) + 2 s = "
                                        f"{bound:.2f}s): {'ok' if lat <= bound else 'LATE'}" if seen else
                                        "never (state never became hung while polled)"))
            if not seen or lat > bound:
                f_ok = False
        for fd in tolerated:
            p(f"  explained        {fd.get('kind')} {fd.get('subject')} at iteration "
              f"{t.iteration_at(fd['start_ns'] / 1e9)} (within an injected fault or pause; not a false positive)")
        for f in t.faults:
            if f["kind"] == "pause":
                p(f"  benign           {describe_fault(f)}: expect no finding")
        r.update({"structure_ok": bool(s_ok), "findings_ok": bool(f_ok),
                  "mismatches": {what: got for what, want, got, verdict in rows if verdict != "ok"},
                  "truth_iterations": tl["truth_iterations"],
                  "netprism_iterations": tl["netprism_iterations"], "matched": tl["matched"],
                  "missing": tl["missing"], "extra": tl["extra"], "after_end": tl["after_end"], "err_median": pct(errs, .5),
                  "err_p95": pct(errs, .95), "err_max": max(errs) if errs else None,
                  "noise_median": pct(t.noise, .5), "noise_p95": pct(t.noise, .95),
                  "noise_max": max(t.noise) if t.noise else None, "step_s": t.step, "findings": frows,
                  "false_positives": false_pos, "explained": tolerated})
        result["structural_ok"] &= bool(s_ok)
        result["jobs"].append(r)
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="run directory (run.json, truth/)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--json", help="netprism analyze-style JSON file ('-' for stdin)")
    src.add_argument("--live", metavar="ENDPOINT", help="query a running aggregator")
    src.add_argument("--self", action="store_true", help="score the truth against itself")
    ap.add_argument("--netprism", help="netprism CLI (default: build/aggregator/netprism, then PATH)")
    ap.add_argument("--out-json", help="write the score as JSON here")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 on a structural mismatch (jobs, nodes, dp/pp/stages/groups, state), a missed "
                         "fault or a false positive")
    ap.add_argument("--max-median-err", type=float, help="exit 1 if a job's median duration error exceeds this %%")
    ap.add_argument("--max-p95-err", type=float, help="exit 1 if a job's p95 duration error exceeds this %%")
    ap.add_argument("--noise-factor", type=float,
                    help="an error within this multiple of the run's own truth noise (same quantile) passes too")
    ap.add_argument("--grace", type=int, default=0,
                    help="the first N truth iterations may be missing/extra (observer locking on)")
    ap.add_argument("--max-finding-delay", type=int,
                    help="exit 1 if a fault's finding starts more than N iterations away from the injection")
    ap.add_argument("--max-missing", type=int, help="exit 1 if more truth iterations are missing")
    ap.add_argument("--max-extra", type=int, help="exit 1 if netprism reports more extra iterations")
    a = ap.parse_args(argv)
    try:
        manifest, truth = load_truth(a.dir)
        if a.self:
            doc = {"jobs": [t.as_netprism() for t in truth]}
        elif a.json:
            doc = json.load(sys.stdin if a.json == "-" else open(a.json))
        else:
            cli = a.netprism
            if not cli:
                here = os.path.dirname(os.path.abspath(__file__))
                cand = os.path.join(here, "..", "..", "build", "aggregator", "netprism")
                cli = cand if os.access(cand, os.X_OK) else "netprism"
            doc = from_live(cli, a.live) if a.live else from_analyze(cli, a.dir)
    except (OSError, ValueError, RuntimeError, KeyError, subprocess.TimeoutExpired) as e:
        print(f"score: {e}", file=sys.stderr)
        return 1
    res = score(manifest, truth, doc, grace=a.grace)
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    fails = []
    if a.strict and not res["structural_ok"]:
        fails.append("structure")
    for j in res["jobs"]:
        if a.strict and not j["findings_ok"]:
            fails.append(f"{j['truth_job']}: findings")
        for q, lim in (("median", a.max_median_err), ("p95", a.max_p95_err)):
            if lim is None:
                continue
            err, noise = j[f"err_{q}"], j[f"noise_{q}"]
            allowed = lim / 100
            if a.noise_factor and noise is not None:
                allowed = max(allowed, a.noise_factor * noise)
            if err is None or err > allowed:
                fails.append(f"{j['truth_job']}: {q} error {fmt_pct(err)} > {fmt_pct(allowed)}")
        if a.max_finding_delay is not None:
            for fr in j["findings"]:
                if fr["ok"] and fr["found_iteration"] is not None and fr["fault_iteration"] is not None and abs(
                        fr["found_iteration"] - fr["fault_iteration"]) > a.max_finding_delay:
                    fails.append(f"{j['truth_job']}: {fr['fault']} found at iteration {fr['found_iteration']}")
        if a.max_missing is not None and j["missing"] > a.max_missing:
            fails.append(f"{j['truth_job']}: {j['missing']} missing iterations > {a.max_missing}")
        if a.max_extra is not None and j["extra"] > a.max_extra:
            fails.append(f"{j['truth_job']}: {j['extra']} extra iterations > {a.max_extra}")
    if fails:
        print("\nFAIL: " + "; ".join(fails))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
