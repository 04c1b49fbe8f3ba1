// Entry point of the analysis pipeline: normalize -> group jobs -> structure -> timeline -> diagnosis.
// The same function serves the daemon (live, Input::now_ns = wall clock) and `netprism analyze` (offline).
#include <algorithm>
#include <map>
#include <set>

#include "analysis.hpp"
#include "counters.hpp"
#include "stages.hpp"

namespace netprism::analysis {

Parallelism parallelism_of(const Normalized& n, const JobSlice& slice, const Structure& s) {
  Parallelism p;
  auto names = [&](const std::vector<std::vector<uint32_t>>& groups) {
    std::vector<std::vector<std::string>> out;
    for (const auto& g : groups) {
      std::vector<std::string> o;
      for (uint32_t v : g) o.push_back(n.nodes[v]);
      std::sort(o.begin(), o.end());
      out.push_back(std::move(o));
    }
    return out;
  };
  p.pp = static_cast<int>(s.stages.size());
  p.stages = names(s.stages);
  p.dp_groups = names(s.dp_groups);
  p.ep = s.ep;
  p.coarse_edges = static_cast<int>(s.coarse_edges);
  p.tp_groups = names(s.tp_groups);
  for (const auto& g : s.tp_groups) p.tp = std::max(p.tp, static_cast<int>(g.size()));
  p.dp = 1;
  for (const auto& g : s.dp_groups) p.dp = std::max(p.dp, static_cast<int>(g.size()));
  // Parallel grouping units per node pair (a long-lived connection, or one endpoint pair's short
  // connections: message-per-record data opens a connection per message, multi-rail servers an endpoint
  // pair per rail).
  std::map<std::pair<uint32_t, uint32_t>, std::set<uint32_t>> per_pair;
  for (size_t i = 0; i < slice.conns.size(); ++i) {
    uint32_t c = slice.conns[i];
    per_pair[std::minmax(n.conns[c].a, n.conns[c].b)].insert(i < slice.unit.size() ? slice.unit[i] : c);
  }
  std::vector<double> counts;
  for (auto& [k, v] : per_pair) counts.push_back(static_cast<double>(v.size()));
  p.tp_hint = static_cast<int>(median(counts) + 0.5);
  return p;
}

std::vector<Iteration> iterations_of(const Normalized& n, const JobSlice& slice, const Structure& s,
                                     const Timeline& t) {
  std::vector<Iteration> its;
  for (size_t i = 0; i + 1 < t.boundaries.size(); ++i) {
    Iteration it;
    it.index = static_cast<int>(i);
    it.start_ns = t.boundaries[i];
    it.end_ns = t.boundaries[i + 1];
    it.duration_ns = it.end_ns - it.start_ns;
    it.phases = node_phases(n, slice, s, t, i);
    // Bubble share: the part of the iteration an average node spends outside its pipeline window.
    if (s.stages.size() > 1 && it.duration_ns > 0) {
      double busy = 0;
      size_t cnt = 0;
      for (const auto& p : it.phases)
        if (p.name == "pipeline") {
          busy += static_cast<double>(p.end_ns - p.start_ns);
          ++cnt;
        }
      if (cnt) it.bubble_share = 1.0 - busy / static_cast<double>(cnt) / static_cast<double>(it.duration_ns);
    }
    its.push_back(std::move(it));
  }
  return its;
}

namespace {

Result analyze_normalized(const Normalized& n, const Fabric& fabric, bool with_counters) {
  Result r;
  std::vector<JobDirections> crossing;  // with a fabric: each job's directions, aligned with r.jobs
  for (const JobSlice& slice : group_jobs(n)) {
    Job j;
    for (uint32_t v : slice.nodes) j.nodes.push_back(n.nodes[v]);
    j.id = job_id(j.nodes, slice.first_ns, slice.id_salt);
    j.first_ns = slice.first_ns;
    j.last_ns = slice.last_ns;
    if (with_counters)
      j.source = std::any_of(slice.conns.begin(), slice.conns.end(),
                             [&](uint32_t c) { return n.conns[c].from_counters; })
                     ? "counters"
                     : "probe";

    Structure s = infer_structure(n, slice);
    j.parallelism = parallelism_of(n, slice, s);
    Timeline t = build_timeline(n, slice, s);
    j.iterations = iterations_of(n, slice, s, t);
    j.step_time_ms = t.step_ns / 1e6;
    j.time_resolution_ms = coarse_resolution_ns(slice, s) / 1e6;
    j.step_time_ms = coarse_step_ns(j.iterations, j.time_resolution_ms * 1e6, j.step_time_ms * 1e6) / 1e6;
    j.state = job_state(n, slice, t.step_ns, j.iterations.size());
    j.findings = diagnose(n, slice, s, t, j.iterations, j.state, n.now_ns, j.id);
    if (!fabric.empty()) crossing.push_back({j.id, direction_states(n, slice, s, t, j.iterations.size())});
    r.jobs.push_back(std::move(j));
  }
  // Across jobs: the fabric's links and switches that every job crossing them finds slow.
  auto slow = fabric_findings(fabric, crossing);
  for (size_t k = 0; k < slow.size(); ++k)
    for (Finding& f : slow[k]) r.jobs[k].findings.push_back(std::move(f));
  return r;
}

}  // namespace

Result analyze(const Input& in) {
  if (in.rdma_bursts.empty() && in.qps.empty()) return analyze_normalized(normalize(in), in.fabric, false);
  // RDMA counters present: their transfers join the observed events (counters.hpp), for the node pairs
  // whose RDMA traffic the probe did not see, and so do the ends of the probe's RoCE flows that the QP
  // tables show (RoCE has no FIN).
  Input merged = in;
  for (auto extra : {counter_events(in), qp_teardown_events(in)})
    merged.events.insert(merged.events.end(), std::make_move_iterator(extra.begin()),
                         std::make_move_iterator(extra.end()));
  return analyze_normalized(normalize(merged), in.fabric, true);
}

}  // namespace netprism::analysis
