// Streaming analysis, the pass: the connection table as normalize() would build it, jobs grouped from it,
// and each job re-analysed over its tail and stitched onto its settled history (see incremental.hpp).
#include <algorithm>
#include <ctime>
#include <tuple>

#include "incremental.hpp"

namespace netprism::analysis {
namespace {

// A cached structure is re-inferred when the job's connections or nodes change, and otherwise every 10
// minutes of the job's traffic: a job's layout does not change while its connections stay the same, and
// the refresh only guards against a first inference made on an unlucky tail.
constexpr uint64_t kRestructureNs = 600'000'000'000ull;
// A tail boundary matches the settled one when within a quarter step: two different boundaries are a step
// apart, and the same boundary computed from two overlapping ranges moves by at most a few transfers.
constexpr double kStitchTolerance = 0.25;

// CPU time of the calling thread: a pass' budget counts the work done, not the time other processes of a
// busy machine held the core (on a shared 2-core machine at load 17 a pass' wall time was ~10x its CPU time,
// and a wall-time budget deferred most jobs every pass).
uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

Result StreamingAnalysis::pass(uint64_t now_ns) {
  stats_.tail_xfers = 0;
  expire(now_ns);
  Normalized n = connection_table(now_ns);
  std::vector<JobSlice> slices = job_slices(n);
  for (auto& [id, h] : hist_) h.seen = false;
  struct Work {
    History* h;
    std::string id;
    std::vector<std::string> names;
  };
  std::vector<Work> work;
  for (auto& sl : slices) {
    std::vector<std::string> names;
    for (uint32_t v : sl.nodes) names.push_back(n.nodes[v]);
    std::string id = job_id_of(sl, names);
    History& h = hist_[id];
    if (h.first_ns == 0) h.first_ns = sl.first_ns;
    h.last_ns = sl.last_ns;
    h.nodes = names;
    h.seen = true;
    work.push_back({&h, std::move(id), std::move(names)});
  }
  // Jobs the last pass deferred first (none waits two passes), then the cheapest (the transfers their last
  // analysis read), then the least recently analysed: every small job is served before a large one, which
  // starts while budget is left, so a pass defers only when several large jobs are due at once. Least
  // recently analysed first (before) deferred the small jobs behind a 512-node job's 0.45 s re-analysis:
  // 139 deferrals in a 6-minute target run (bench/README.md).
  std::vector<size_t> order(work.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto rank = [&](size_t i) {
    const History& h = *work[i].h;
    return std::make_tuple(!h.deferred, h.last_tail, h.analysed_ns);
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank(a) < rank(b); });
  Result r;
  r.jobs.resize(work.size());
  const uint64_t started = thread_cpu_ns();
  bool progressed = false;  // a pass always re-analyses at least one due job: the least recently analysed
  for (size_t i : order) {
    History& h = *work[i].h;
    if (lim_.pass_budget_ns && progressed && h.has_last && due(slices[i], h, now_ns) &&
        thread_cpu_ns() - started > lim_.pass_budget_ns) {
      ++stats_.deferred;  // counted (`netprism status`): its new iterations show up a pass later
      h.deferred = true;
      r.jobs[i] = last_result(h);
      r.jobs[i].nodes = std::move(work[i].names);
      continue;
    }
    const uint64_t analysed = stats_.analysed;
    h.deferred = false;
    r.jobs[i] = current_job(n, slices[i], h, work[i].id, std::move(work[i].names), now_ns);
    progressed = progressed || stats_.analysed != analysed;
  }
  std::unordered_map<uint64_t, std::string> job_of_uid;
  std::vector<uint64_t> keep_from(conns_.size(), now_ns > kTailNs ? now_ns - kTailNs : 0);
  for (size_t i = 0; i < slices.size(); ++i)
    for (uint32_t c : slices[i].conns) {
      job_of_uid[conns_[c].uid] = work[i].id;
      keep_from[c] = work[i].h->tail_from;
    }
  job_of_uid_ = std::move(job_of_uid);
  if (!fabric_.empty()) {
    std::vector<const History*> hs;
    for (const Work& w : work) hs.push_back(w.h);
    add_fabric_findings(r, hs);
  }
  std::erase_if(hist_, [](const auto& kv) { return !kv.second.seen; });
  for (auto* spare : {&spare_xfers_, &spare_arrivals_})
    if (tail_need_ < spare->capacity() / 4) *spare = {};
  tail_need_ = 0;
  prune(keep_from, now_ns);
  enforce_xfer_bound();
  stats_.conns = conns_.size();
  stats_.flows = flows_.size();
  stats_.iterations = stats_.phases = 0;
  for (const auto& [id, h] : hist_) {
    stats_.iterations += h.iterations.size();
    for (size_t i = h.phases_from; i < h.iterations.size(); ++i)
      stats_.phases += h.iterations[i].phases.size();
  }
  stats_.xfers = total_xfers_;
  return r;
}

Normalized StreamingAnalysis::connection_table(uint64_t now_ns) {
  Normalized n;
  n.now_ns = now_ns;
  n.offline = offline_;
  for (auto& c : conns_) {  // resolve every endpoint first: node indices must exist before n.nodes is taken
    node_of_addr(c.key.a);
    node_of_addr(c.key.b);
  }
  n.nodes = nodes_;
  n.conns.reserve(conns_.size());
  for (const auto& cs : conns_) {
    Conn c;
    c.a = node_of_addr(cs.key.a);
    c.b = node_of_addr(cs.key.b);
    c.first_ns = cs.first_ns;
    c.last_ns = cs.last_ns;
    c.closed = cs.closed;
    c.from_counters = cs.from_counters;
    c.counters_interval_ms = cs.counters_interval_ms;
    c.sampled_1_in = cs.sampled_1_in;
    c.label = cs.label;
    c.addr_a = cs.key.a;
    c.addr_b = cs.key.b;
    c.proto = cs.key.proto;
    for (uint32_t f : cs.flows) {
      const FlowSt& fl = flows_[f];
      for (const auto& o : fl.obs)
        if (o.obs == fl.chosen) {
          (fl.fwd ? c.bytes_ab : c.bytes_ba) += o.bytes;
          c.xfers += o.xfers;
        }
    }
    n.conns.push_back(std::move(c));
  }
  return n;
}

std::vector<JobSlice> StreamingAnalysis::job_slices(const Normalized& n) const {
  // n.xfers is empty (connections and nodes only): the transfers kept per flow tell when a connection was
  // busy.
  auto activity = [this](uint32_t c, uint64_t from, Intervals& out) {
    for (uint32_t f : conns_[c].flows) {
      const FlowSt& fl = flows_[f];
      for (size_t i = 0; i < fl.xs.size(); ++i)
        if (fl.xs[i].obs == fl.chosen && fl.xs[i].t1 >= from) out.emplace_back(fl.xs[i].t0, fl.xs[i].t1);
    }
  };
  std::vector<JobSlice> slices = group_jobs(n, activity);
  for (auto& sl : slices) {
    sl.first_ns = UINT64_MAX;
    sl.last_ns = 0;
    for (uint32_t c : sl.conns)
      for (uint32_t f : conns_[c].flows)
        for (const auto& o : flows_[f].obs)
          if (o.obs == flows_[f].chosen && o.xfers) {
            sl.first_ns = std::min(sl.first_ns, o.first_t0);
            sl.last_ns = std::max(sl.last_ns, o.last_t1);
          }
    if (sl.first_ns == UINT64_MAX) sl.first_ns = 0;
  }
  std::stable_sort(slices.begin(), slices.end(),
                   [](const JobSlice& a, const JobSlice& b) { return a.first_ns < b.first_ns; });
  salt_shared_ids(n, slices);  // with the first transfers now known
  return slices;
}

std::string StreamingAnalysis::job_id_of(const JobSlice& sl, const std::vector<std::string>& names) const {
  std::string id = job_id(names, sl.first_ns, sl.id_salt);
  // A job whose first connection was forgotten (silent for the whole window) would get a new id from
  // its later first transfer: keep the id its connections had, when the nodes are the same.
  // Not for a tenant whose id is salted (salt_shared_ids): its connections may have been one job with its
  // neighbour's while both had shown a single burst, and its id is its own from the first transfer on.
  if (!hist_.count(id) && sl.id_salt.empty()) {
    for (uint32_t c : sl.conns)
      if (auto it = job_of_uid_.find(conns_[c].uid); it != job_of_uid_.end()) {
        auto h = hist_.find(it->second);
        if (h != hist_.end() && !h->second.seen && h->second.first_ns <= sl.first_ns &&
            h->second.nodes == names)
          id = it->second;
        break;
      }
  }
  return id;
}

Job StreamingAnalysis::last_result(const History& h) {
  Job j = h.last;
  j.iterations = h.iterations;
  j.findings = h.findings;
  return j;
}

bool StreamingAnalysis::due(const JobSlice& sl, const History& h, uint64_t now_ns) const {
  // A recording's last pass (set_offline) is its judgement: every job's state as analyze() judges it.
  if (offline_ || !h.has_last || h.last_conns != sl.conns.size()) return true;
  uint64_t fresh = 0;
  for (uint32_t c : sl.conns) fresh += conns_[c].fresh;
  if (fresh == 0 && h.last.state != "running") {  // settled: hung, idle or ended, and nothing new since
    uint64_t quiet = now_ns > sl.last_ns ? now_ns - sl.last_ns : 0;
    return now_ns >= h.analysed_ns + std::max(kStaleNs, quiet / kSettledRecheckDivisor);
  }
  if (now_ns >= h.analysed_ns + kStaleNs) return true;
  // A small job: every pass while it is silent (its state can change with time alone) or has no period yet;
  // while its data flows, by its period as a large one (kReuseMinXfers).
  if (h.last_tail <= kReuseMinXfers && (fresh == 0 || !h.next_due_ns)) return true;
  if (fresh == 0) return false;
  if (h.next_due_ns) {  // periodic: its data passed the due time, or the time since its last analysis did
    // (a job with only DP traffic is silent between its syncs: the end of one shows by time, not by data).
    const uint64_t since = now_ns > h.analysed_ns ? now_ns - h.analysed_ns : 0;
    return std::max(sl.last_ns, h.last.last_ns + since) >= h.next_due_ns;  // h.last: its data time then
  }
  return fresh * std::max<size_t>(1, h.tail_iterations) >= h.last_tail;
}

void StreamingAnalysis::set_next_due(History& h, const JobSlice& sl, const Timeline& t) {
  // Periodic: due when the data passes the next expected boundary, and from then on every kRetryNs of data
  // (or quarter step, if shorter) until it shows. Aperiodic (no step): by new transfers (due()).
  h.next_due_ns = 0;
  if (h.boundaries.size() < 2 || t.step_ns <= 0) return;
  const double step = t.step_ns;
  const uint64_t margin = static_cast<uint64_t>(std::min(kRetryNs, 0.25 * step));
  uint64_t expected = h.boundaries.back() + static_cast<uint64_t>(0.95 * step);
  uint64_t retry = sl.last_ns + margin;
  // A boundary at the very end of the data may close a synchronisation whose records are still arriving
  // (each agent flushes on its own, about once a second): the analysis saw part of it, and the boundary
  // may move or the iteration not count yet. Its rest is then due by the retry, not a step later. In a
  // 6-minute target run, one iteration in ~24 of jobs with 3.5-9 s steps showed only with the next step's
  // data or after kStaleNs (4.3-5.9 s late; p99 5.1 s): analysed mid-synchronisation, its boundary was
  // placed on the part seen, and the rest waited for the next expected boundary.
  const bool at_data_end = sl.last_ns < h.boundaries.back() + margin;
  h.next_due_ns = at_data_end ? retry : std::max(expected, retry);
}

Job StreamingAnalysis::current_job(const Normalized& n, JobSlice& sl, History& h, const std::string& id,
                                   std::vector<std::string> names, uint64_t now_ns) {
  if (!due(sl, h, now_ns)) {
    ++stats_.reused;
    Job j = last_result(h);
    j.nodes = std::move(names);
    return j;
  }
  ++stats_.analysed;
  Job j = analyse_job(n, sl, h, id);
  h.settled = j.state != "running";
  j.nodes = std::move(names);
  for (uint32_t c : sl.conns) conns_[c].fresh = 0;
  h.last_tail = sl.xfers.size();
  h.last_conns = sl.conns.size();
  h.analysed_ns = now_ns;
  // A copy where it can stand in for an analysis: a job large enough to be skipped, or any job when a pass
  // budget may defer it.
  h.has_last = h.last_tail > kReuseMinXfers || lim_.pass_budget_ns;
  if (h.has_last) {  // without its iterations and findings: the history holds the same (last_result())
    std::vector<Iteration> its = std::move(j.iterations);
    std::vector<Finding> fs = std::move(j.findings);
    h.last = j;
    j.iterations = std::move(its);
    j.findings = std::move(fs);
  }
  for (auto [list, spare] :
       {std::pair{&sl.xfers, &spare_xfers_}, std::pair{&sl.arrivals, &spare_arrivals_}}) {
    if (list->capacity() > spare->capacity()) std::swap(*list, *spare);
    *list = {};
  }
  return j;
}

Job StreamingAnalysis::analyse_job(const Normalized& n, JobSlice& sl, History& h, const std::string& id) {
  collect_tail(n, sl, h);
  const bool young = h.tail_from == 0;
  Structure& s = cached_structure(n, sl, h, young);
  Job j;
  j.id = id;
  j.first_ns = sl.first_ns;
  j.last_ns = sl.last_ns;
  if (rdma_sources_)  // as analyze() tags a job of an input with RDMA counters
    j.source =
        std::any_of(sl.conns.begin(), sl.conns.end(), [&](uint32_t c) { return n.conns[c].from_counters; })
            ? "counters"
            : "probe";
  j.parallelism = parallelism_of(n, sl, s);
  Timeline t = build_timeline(n, sl, s);
  std::vector<Iteration> local = iterations_of(n, sl, s, t);
  const size_t keep = stitch_boundaries(h, t, young);
  settle_iterations(h, local, keep);
  // Iterations [0, prefix) were left as they were; the rest came from this tail.
  const size_t prefix = keep > 0 ? std::min(h.iterations.size(), keep - 1) : 0;
  h.phases_from = std::min(h.phases_from, prefix);
  h.tail_iterations = local.size();
  bound_phases(h);
  j.iterations = h.iterations;
  j.step_time_ms = (young ? t.step_ns : step_median(h, prefix)) / 1e6;
  j.time_resolution_ms = coarse_resolution_ns(sl, s) / 1e6;
  j.step_time_ms = coarse_step_ns(j.iterations, j.time_resolution_ms * 1e6, j.step_time_ms * 1e6) / 1e6;
  j.state = job_state(n, sl, t.step_ns, j.iterations.size());
  merge_findings(h, diagnose(n, sl, s, t, local, j.state, n.now_ns, id), local, young);
  if (!fabric_.empty()) note_directions(h, direction_states(n, sl, s, t, local.size()));
  j.findings = h.findings;
  move_tail(h, sl, t);
  set_next_due(h, sl, t);
  return j;
}

double StreamingAnalysis::step_median(History& h, size_t prefix) {
  // median() of every iteration's duration: the settled prefix's durations are kept sorted (each added once),
  // the tail's few sorted apart, and the k-th of the union read off the two.
  auto& s = h.settled_durations;
  if (prefix < h.settled_n) s.clear(), h.settled_n = 0;  // the tail reached back into it (a restitch)
  for (; h.settled_n < prefix; ++h.settled_n) {
    uint64_t d = h.iterations[h.settled_n].duration_ns;
    s.insert(std::upper_bound(s.begin(), s.end(), d), d);
  }
  std::vector<uint64_t> t;
  for (size_t k = prefix; k < h.iterations.size(); ++k) t.push_back(h.iterations[k].duration_ns);
  std::sort(t.begin(), t.end());
  const size_t total = s.size() + t.size();
  if (total == 0) return 0;
  auto kth = [&](size_t k) {  // 0-based k-th smallest of s and t together
    for (size_t j = 0; j <= std::min(t.size(), k + 1); ++j) {
      if (k + 1 - j > s.size()) continue;
      size_t i = k + 1 - j;  // i from s, j from t make up the k + 1 smallest
      bool ok =
          (j == t.size() || i == 0 || s[i - 1] <= t[j]) && (i == s.size() || j == 0 || t[j - 1] <= s[i]);
      if (ok) return std::max(i ? s[i - 1] : 0, j ? t[j - 1] : 0);
    }
    return uint64_t{0};
  };
  const size_t m = total / 2;
  double hi = static_cast<double>(kth(m));
  if (total % 2) return hi;
  return (static_cast<double>(kth(m - 1)) + hi) / 2;
}

template <class Visit>
void StreamingAnalysis::for_tail_xfers(const Normalized& n, const JobSlice& sl, const History& h,
                                       Visit&& visit) {
  for (size_t ci = 0; ci < sl.conns.size(); ++ci) {
    // Transfers name their grouping unit's standing connection, as group_jobs() lists them.
    uint32_t c = sl.conns[ci], unit = sl.unit[ci];
    for (uint32_t f : conns_[c].flows) {
      const FlowSt& fl = flows_[f];
      uint32_t src = fl.fwd ? n.conns[c].a : n.conns[c].b, dst = fl.fwd ? n.conns[c].b : n.conns[c].a;
      // The receiver's own records of a direction whose sender's view is chosen: its arrival times.
      uint32_t sender = node_sid(node_of_addr(fl.key.src));
      uint32_t receiver = fl.chosen == sender ? name_sid_of_addr(fl.key.dst) : UINT32_MAX;
      for (size_t i = 0; i < fl.xs.size(); ++i) {
        const XRec& x = fl.xs[i];
        if (x.t0 < h.tail_from) continue;
        if (x.obs == fl.chosen)
          visit(true, src, dst, unit, x);
        else if (x.obs == receiver)
          visit(false, src, dst, unit, x);
      }
    }
  }
}

void StreamingAnalysis::collect_tail(const Normalized& n, JobSlice& sl, const History& h) {
  // The job's transfers from its tail on, as normalize() + group_jobs() would list them. Counted first and
  // reserved once (not grown by doubling): a pass of a large job copies up to a pass' worth of new transfers
  // (the 1,000-agent load test: ~1 million, 40 MB), and doubling held up to three times that for a moment, a
  // sawtooth in the aggregator's RSS at every such pass.
  size_t mine = 0, theirs = 0;
  for_tail_xfers(n, sl, h,
                 [&](bool chosen, uint32_t, uint32_t, uint32_t, const XRec&) { ++(chosen ? mine : theirs); });
  tail_need_ = std::max({tail_need_, mine, theirs});
  // A quarter's headroom when a list must grow: the next pass' backlog is rarely that much larger.
  auto take = [](std::vector<Xfer>& list, std::vector<Xfer>& spare, size_t size) {
    std::swap(list, spare);
    list.clear();
    if (list.capacity() < size) list = {}, list.reserve(size + size / 4);
  };
  take(sl.xfers, spare_xfers_, mine);
  take(sl.arrivals, spare_arrivals_, theirs);
  for_tail_xfers(n, sl, h, [&](bool chosen, uint32_t src, uint32_t dst, uint32_t unit, const XRec& x) {
    (chosen ? sl.xfers : sl.arrivals).push_back({src, dst, unit, x.packets, x.t0, x.t1, x.bytes});
  });
  auto by_time = [](const Xfer& x, const Xfer& y) {
    return std::tie(x.t0, x.t1, x.conn) < std::tie(y.t0, y.t1, y.conn);
  };
  std::sort(sl.xfers.begin(), sl.xfers.end(), by_time);
  std::sort(sl.arrivals.begin(), sl.arrivals.end(), by_time);
  stats_.tail_xfers += sl.xfers.size();
  stats_.reanalysed_xfers += sl.xfers.size();
}

Structure& StreamingAnalysis::cached_structure(const Normalized& n, const JobSlice& sl, History& h,
                                               bool young) {
  // Inferred on every pass while the job is young (as offline), then cached until its connections or nodes
  // change.
  std::vector<uint64_t> key;
  for (uint32_t c : sl.conns) key.push_back(conns_[c].uid);
  std::sort(key.begin(), key.end());
  for (uint32_t v : sl.nodes) key.push_back(v);
  if (young || !h.has_structure || key != h.structure_key || sl.last_ns > h.structure_ns + kRestructureNs) {
    h.structure = infer_structure(n, sl);
    h.structure_key = std::move(key);
    h.structure_ns = sl.last_ns;
    h.has_structure = true;
    ++stats_.structure_runs;
  }
  Structure& s = h.structure;
  s.stage_of.resize(n.nodes.size(), -1);  // nodes seen since (outside this job) are in no stage
  s.group_of.resize(n.nodes.size(), -1);
  return s;
}

size_t StreamingAnalysis::stitch_boundaries(History& h, const Timeline& t, bool young) {
  // Below the anchor the history is settled; from it on the tail's boundaries replace it.
  if (young || h.anchor >= h.boundaries.size() || t.boundaries.empty()) {
    h.boundaries = t.boundaries;
    return 0;
  }
  std::vector<double> d;
  for (size_t i = h.anchor > 16 ? h.anchor - 16 : 0; i + 1 <= h.anchor; ++i)
    d.push_back(static_cast<double>(h.boundaries[i + 1] - h.boundaries[i]));
  double step = median(d);
  uint64_t a = h.boundaries[h.anchor];
  auto nearest = std::min_element(t.boundaries.begin(), t.boundaries.end(), [&](uint64_t x, uint64_t y) {
    return (x > a ? x - a : a - x) < (y > a ? y - a : a - y);
  });
  uint64_t dist = *nearest > a ? *nearest - a : a - *nearest;
  size_t keep = h.anchor + 1;  // boundaries of the history kept (in place: no copy of a long history)
  auto& b = h.boundaries;
  b.resize(keep);
  if (static_cast<double>(dist) <= kStitchTolerance * step) {
    b.insert(b.end(), nearest + 1, t.boundaries.end());
  } else {
    ++stats_.restitched;  // counted: the history and the tail disagree at the anchor
    for (uint64_t x : t.boundaries)
      if (static_cast<double>(x) > static_cast<double>(a) + 0.5 * step) b.push_back(x);
  }
  return keep;
}

void StreamingAnalysis::settle_iterations(History& h, const std::vector<Iteration>& local, size_t keep) {
  // Iterations from `keep - 1` on come from the tail (with their phases) when the tail has the same one,
  // else carry start/end only (a restitched gap).
  if (keep > 0)
    h.iterations.resize(std::min(h.iterations.size(), keep - 1));
  else
    h.iterations.clear();
  for (size_t k = h.iterations.size(); k + 1 < h.boundaries.size(); ++k) {
    auto it = std::lower_bound(local.begin(), local.end(), h.boundaries[k],
                               [](const Iteration& x, uint64_t v) { return x.start_ns < v; });
    Iteration x;
    if (it != local.end() && it->start_ns == h.boundaries[k] && it->end_ns == h.boundaries[k + 1]) x = *it;
    x.index = static_cast<int>(k);
    x.start_ns = h.boundaries[k];
    x.end_ns = h.boundaries[k + 1];
    x.duration_ns = x.end_ns - x.start_ns;
    h.iterations.push_back(std::move(x));
  }
}

void StreamingAnalysis::bound_phases(History& h) {
  // The most recent iterations keep their phases, up to kMaxPhases in all; older ones keep start/end. Only
  // iterations from phases_from on can still have phases: the walk stops there.
  size_t kept = 0, k = h.iterations.size();
  while (k > h.phases_from && kept + h.iterations[k - 1].phases.size() <= kMaxPhases)
    kept += h.iterations[--k].phases.size();
  for (size_t i = h.phases_from; i < k; ++i) h.iterations[i].phases.clear();
  h.phases_from = k;
}

void StreamingAnalysis::merge_findings(History& h, std::vector<Finding> fs,
                                       const std::vector<Iteration>& local, bool young) {
  // Findings of the tail (iteration numbers are the tail's own: mapped to the job's by start time), after
  // the settled ones of the history.
  if (young) {
    h.findings = std::move(fs);
    return;
  }
  std::vector<Finding> merged;
  for (const auto& f : h.findings)
    if (f.start_ns < h.tail_from) merged.push_back(f);
  for (auto f : fs) {
    if (f.first_iteration >= 0 && static_cast<size_t>(f.first_iteration) < local.size()) {
      uint64_t st = local[static_cast<size_t>(f.first_iteration)].start_ns;
      auto b = std::lower_bound(h.boundaries.begin(), h.boundaries.end(), st);
      f.first_iteration = static_cast<int>(b - h.boundaries.begin());
    } else if (!local.empty() || f.first_iteration > 0) {
      f.first_iteration = static_cast<int>(h.iterations.size());  // past the last one (e.g. a hang)
    }
    bool dup = std::any_of(merged.begin(), merged.end(),
                           [&](const Finding& g) { return g.kind == f.kind && g.subject == f.subject; });
    if (!dup) merged.push_back(std::move(f));
  }
  h.findings = std::move(merged);
}

void StreamingAnalysis::move_tail(History& h, const JobSlice& sl, const Timeline& t) {
  if (h.boundaries.size() >= 2)
    move_periodic_tail(h, sl, t);
  else
    move_aperiodic_tail(h, sl);
}

void StreamingAnalysis::move_periodic_tail(History& h, const JobSlice& sl, const Timeline& t) {
  // The tail starts one iteration before the anchor (so the anchor's whole synchronisation is in it) and
  // keeps at least kTailIterations iterations and kTailNs of traffic after that. The kTailNs extension stops
  // where the tail would hold more than kTailMaxXfers transfers: a large job (hundreds of nodes) gets its
  // kTailIterations iterations only.
  auto xfers_since = [&](uint64_t b) {
    return static_cast<size_t>(sl.xfers.end() -
                               std::lower_bound(sl.xfers.begin(), sl.xfers.end(), b,
                                                [](const Xfer& x, uint64_t v) { return x.t0 < v; }));
  };
  long k = static_cast<long>(h.boundaries.size()) - 1 - static_cast<long>(kTailIterations);
  while (k >= 1 && sl.last_ns - h.boundaries[static_cast<size_t>(k - 1)] < kTailNs) {
    if (k >= 2 && xfers_since(h.boundaries[static_cast<size_t>(k - 2)]) > kTailMaxXfers) break;
    --k;
  }
  // A very large job: fewer iterations, down to kMinTailIterations, while the tail is over its budget (also
  // while it is young: its whole history would otherwise be re-read until it has kTailIterations).
  k = std::max(k, 1L);
  while (h.boundaries.size() > static_cast<size_t>(k) + 1 + kMinTailIterations &&
         xfers_since(h.boundaries[static_cast<size_t>(k - 1)]) > kTailBudgetXfers)
    ++k;
  if (k < 2) return;
  // The tail starts where the data of the iteration that begins at boundary k - 1 began (the boundary
  // itself, or the drain before it for a pipeline without DP: see Timeline::data_from).
  uint64_t b = h.boundaries[static_cast<size_t>(k - 1)], from = b;
  auto it = std::lower_bound(t.boundaries.begin(), t.boundaries.end(), b);
  if (it != t.boundaries.end() && *it == b)
    from = t.data_from[static_cast<size_t>(it - t.boundaries.begin())];
  if (from > h.tail_from) {
    h.anchor = static_cast<size_t>(k);
    h.tail_from = from;
  }
}

void StreamingAnalysis::move_aperiodic_tail(History& h, const JobSlice& sl) {
  // No period found (yet): once the job is older than kTailNs, keep looking at its most recent kTailNs
  // only, and at most at its last kAperiodicMaxXfers transfers.
  uint64_t from = sl.last_ns > sl.first_ns + kTailNs ? sl.last_ns - kTailNs : 0;
  if (sl.xfers.size() > kAperiodicMaxXfers)
    from = std::max(from, sl.xfers[sl.xfers.size() - kAperiodicMaxXfers].t0);
  if (from > h.tail_from) {
    h.tail_from = from;
    h.anchor = 0;
    h.boundaries.clear();
    h.iterations.clear();
  }
}

}  // namespace netprism::analysis
