// Stage 4: iteration boundaries and per-iteration synchronisation details.
//
// With data parallelism the boundary is the end of the first stage's DP synchronisation (the first stage
// finishes its backward pass last, so its synchronisation closes the iteration); the synchronisations are
// found in timeline_sync.cpp. Without data parallelism the boundary is the first activation the first stage
// sends after all the previous iteration's micro-batches returned (timeline_pipeline.cpp). Every other DP
// group's synchronisations are paired with the reference's iterations in timeline_pairing.cpp.
#include <algorithm>
#include <string>

#include "debug_log.hpp"
#include "timeline_steps.hpp"

namespace netprism::analysis {

using timeline_steps::GroupEnds;
using timeline_steps::is_dp_xfer;
using timeline_steps::Reference;

namespace {

// Leading boundaries that make an iteration shorter than half the median come from starting to watch in the
// middle of an iteration; they are dropped (a real iteration never runs at twice the speed of its peers).
constexpr double kShortLeadingIteration = 0.5;

// Debug dump of the job's transfers and arrivals with the stages of their ends (debug_log.hpp).
void dump_transfers(const Normalized& n, const JobSlice& job, const Structure& s) {
  std::string csv = "kind,src,dst,src_stage,dst_stage,t0,t1,bytes\n";
  for (const auto* list : {&job.xfers, &job.arrivals})
    for (const Xfer& x : *list)
      debug::appendf(csv, "%c,%s,%s,%d,%d,%llu,%llu,%llu\n", list == &job.xfers ? 'x' : 'a',
                     n.nodes[x.src].c_str(), n.nodes[x.dst].c_str(), s.stage_of[x.src], s.stage_of[x.dst],
                     static_cast<unsigned long long>(x.t0), static_cast<unsigned long long>(x.t1),
                     static_cast<unsigned long long>(x.bytes));
  debug::dump(n.nodes[job.nodes[0]], csv);
}

// The reference DP group: the first stage's (the largest of its groups); -1 without DP.
int reference_group(const Structure& s) {
  int ref = -1;
  for (size_t g = 0; g < s.dp_groups.size(); ++g)
    if (ref < 0 || s.stage_of[s.dp_groups[g][0]] < s.stage_of[s.dp_groups[static_cast<size_t>(ref)][0]] ||
        (s.stage_of[s.dp_groups[g][0]] == s.stage_of[s.dp_groups[static_cast<size_t>(ref)][0]] &&
         s.dp_groups[g].size() > s.dp_groups[static_cast<size_t>(ref)].size()))
      ref = static_cast<int>(g);
  return ref;
}

// The reference group's synchronisation ends, or without DP the pipeline's boundaries, and the step.
// A synchronisation stretched by a slow link can split into several complete episodes: spacings then
// alternate short and long. The step is the median of the upper half of the spacings (every spacing when
// they are all steps; only the long ones otherwise), and reference ends closer than half of it are one
// synchronisation (the later end kept).
Reference reference(const JobSlice& job, const Structure& s) {
  Reference r;
  r.group = reference_group(s);
  if (r.group >= 0) {
    r.ends = timeline_steps::merge_stalled(sync_ends(job, s, r.group), job, s, r.group);
  } else {
    timeline_steps::PipelineBoundaries pb = timeline_steps::pipeline_drains(job, s);
    r.ends = std::move(pb.boundaries);
    r.from = std::move(pb.drains);
  }
  std::vector<double> rd = spacings(r.ends);
  if (r.group >= 0 && rd.size() >= 4) {
    std::vector<double> sorted = rd;
    std::sort(sorted.begin(), sorted.end());
    double step =
        median(std::vector<double>(sorted.begin() + static_cast<long>(sorted.size() / 2), sorted.end()));
    r.ends = timeline_steps::merge_close(r.ends, 0.5 * step);
    rd = spacings(r.ends);
  }
  r.step = median(rd);
  return r;
}

// The reference slot of a synchronisation end `e`: the nearest reference end within (-0.6, +0.4] of a step
// (stages finish before the first one, a faulty one may finish a little after it); -1: none.
int slot_of_end(const Reference& r, uint64_t e) {
  const double T = r.step;
  auto it =
      std::lower_bound(r.ends.begin(), r.ends.end(), e > 0.4 * T ? e - static_cast<uint64_t>(0.4 * T) : 0);
  if (it == r.ends.end()) return -1;
  if (static_cast<double>(*it) - 0.6 * T >= static_cast<double>(e)) return -1;
  return static_cast<int>(it - r.ends.begin());
}

void log_slots(const Reference& r, const std::vector<GroupEnds>& groups,
               const std::vector<std::vector<uint64_t>>& member_end) {
  uint64_t o = r.ends[0];
  auto ms = [&](uint64_t v) { return v ? (static_cast<double>(v) - static_cast<double>(o)) / 1e6 : -1.0; };
  std::string l;
  debug::appendf(l, "timeline: step %.1f ms; per slot: reference end, then per group: end, member end",
                 r.step / 1e6);
  debug::line(l);
  for (size_t k = 0; k < r.ends.size(); ++k) {
    l.clear();
    debug::appendf(l, "  slot %2zu ref %9.1f", k, ms(r.ends[k]));
    for (size_t g = 0; g < groups.size(); ++g)
      debug::appendf(l, " | g%zu %9.1f %9.1f", g, ms(groups[g].by_slot[k]), ms(member_end[g][k]));
    debug::line(l);
  }
}

// Boundaries: the end of each iteration's last synchronisation over the stages (the DP groups finish one
// after the other, the first stage usually last; a stage slowed by its links can finish later), each
// group's end read from its members (member_ends). Without DP, the pipeline's boundaries. Returns each
// boundary's reference slot.
std::vector<size_t> place_boundaries(Timeline& t, const Reference& r,
                                     const std::vector<std::vector<uint64_t>>& member_end) {
  std::vector<size_t> slot_of;
  for (size_t k = 0; k < r.ends.size(); ++k) {
    uint64_t b = 0;
    if (r.group >= 0) {
      for (const auto& row : member_end) b = std::max(b, row[k]);
      if (b == 0) b = r.ends[k];
    } else {
      b = r.ends[k];
    }
    if (!t.boundaries.empty() && b <= t.boundaries.back()) continue;
    t.boundaries.push_back(b);
    t.data_from.push_back(r.group >= 0 ? b : r.from[k]);
    slot_of.push_back(k);
  }
  return slot_of;
}

// Drops the leading boundaries that start watching mid-iteration (kShortLeadingIteration), then sets the
// step.
void drop_partial_first_iterations(Timeline& t, std::vector<size_t>& slot_of) {
  double med = median(spacings(t.boundaries));
  while (t.boundaries.size() >= 3 &&
         static_cast<double>(t.boundaries[1] - t.boundaries[0]) < kShortLeadingIteration * med) {
    t.boundaries.erase(t.boundaries.begin());
    t.data_from.erase(t.data_from.begin());
    slot_of.erase(slot_of.begin());
  }
  t.step_ns = median(spacings(t.boundaries));
}

// Per iteration, per group: sync end and each member's join (first DP send after the group's previous
// synchronisation). Iteration i ends at boundary i + 1.
void fill_syncs(Timeline& t, const JobSlice& job, const Structure& s, const Reference& r,
                const std::vector<GroupEnds>& groups, const std::vector<size_t>& slot_of) {
  size_t iters = t.boundaries.size() > 1 ? t.boundaries.size() - 1 : 0;
  t.syncs.assign(iters, std::vector<Timeline::GroupSync>(s.dp_groups.size()));
  std::vector<int> iter_of_slot(r.ends.size(), -1);
  for (size_t i = 1; i < slot_of.size(); ++i) iter_of_slot[slot_of[i]] = static_cast<int>(i) - 1;
  std::vector<int> member_pos(s.group_of.size(), -1);  // node -> index in its DP group (no linear search)
  for (const auto& grp : s.dp_groups)
    for (size_t m = 0; m < grp.size(); ++m) member_pos[grp[m]] = static_cast<int>(m);
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& members = s.dp_groups[g];
    const auto& by_slot = groups[g].by_slot;
    for (size_t k = 0; k < r.ends.size(); ++k)
      if (iter_of_slot[k] >= 0 && by_slot[k]) {
        auto& gs = t.syncs[static_cast<size_t>(iter_of_slot[k])][g];
        gs.end = by_slot[k];
        gs.join.assign(members.size(), 0);
      }
    const auto& ends = groups[g].in_order;
    for (const Xfer& x : job.xfers) {
      if (!is_dp_xfer(s, x, static_cast<int>(g))) continue;
      auto it = std::lower_bound(ends.begin(), ends.end(), x.t0);
      if (it == ends.end()) continue;
      int k = slot_of_end(r, *it);
      if (k < 0 || iter_of_slot[static_cast<size_t>(k)] < 0 || by_slot[static_cast<size_t>(k)] != *it)
        continue;
      auto& gs = t.syncs[static_cast<size_t>(iter_of_slot[static_cast<size_t>(k)])][g];
      size_t m = member_pos[x.src] >= 0 ? static_cast<size_t>(member_pos[x.src]) : members.size();
      if (m < members.size() && (gs.join[m] == 0 || x.t0 < gs.join[m])) gs.join[m] = x.t0;
      if (gs.start == 0 || x.t0 < gs.start) gs.start = x.t0;
    }
  }
}

}  // namespace

// The truth of an iteration boundary is the moment the job's ranks come out of their synchronisation; with
// several stages they do so at different times (the last stage first). Iterations are delimited by a
// reference (the first stage's synchronisation or drain), every DP group's synchronisations are attached to
// the reference's iterations, and the boundary is the latest group's end as its members saw it.
Timeline build_timeline(const Normalized& n, const JobSlice& job, const Structure& s) {
  if (debug::dumps_on() && !job.nodes.empty()) dump_transfers(n, job, s);
  Reference r = reference(job, s);
  std::vector<GroupEnds> groups;
  std::vector<std::vector<uint64_t>> member_end;
  if (r.group >= 0)
    for (size_t g = 0; g < s.dp_groups.size(); ++g) {
      groups.push_back(timeline_steps::pair_group(job, s, g, r));
      member_end.push_back(timeline_steps::member_ends(job, s, g, groups.back(), r));
    }
  if (debug::lines_on() && !r.ends.empty()) log_slots(r, groups, member_end);
  Timeline t;
  std::vector<size_t> slot_of = place_boundaries(t, r, member_end);
  drop_partial_first_iterations(t, slot_of);
  fill_syncs(t, job, s, r, groups, slot_of);
  return t;
}

std::vector<Phase> node_phases(const Normalized& n, const JobSlice& job, const Structure& s,
                               const Timeline& t, size_t i) {
  std::vector<Phase> out;
  if (i + 1 >= t.boundaries.size()) return out;
  uint64_t lo = t.boundaries[i], hi = t.boundaries[i + 1];
  // Pipeline window per node, indexed by node (a map per transfer would cost a log factor on large jobs).
  std::vector<std::pair<uint64_t, uint64_t>> win(n.nodes.size(), {0, 0});
  std::vector<char> seen(n.nodes.size(), 0);
  auto first = std::lower_bound(job.xfers.begin(), job.xfers.end(), lo,
                                [](const Xfer& x, uint64_t v) { return x.t0 < v; });
  for (auto it = first; it != job.xfers.end() && it->t0 < hi; ++it) {
    if (s.stage_of[it->src] == s.stage_of[it->dst]) continue;
    for (uint32_t v : {it->src, it->dst}) {
      if (!seen[v]) {
        seen[v] = 1;
        win[v] = {it->t0, std::min(it->t1, hi)};
      } else {
        win[v].second = std::max(win[v].second, std::min(it->t1, hi));
      }
    }
  }
  for (uint32_t v = 0; v < n.nodes.size(); ++v)
    if (seen[v]) out.push_back({n.nodes[v], "pipeline", win[v].first, win[v].second});
  if (i < t.syncs.size())
    for (size_t g = 0; g < s.dp_groups.size(); ++g) {
      const auto& gs = t.syncs[i][g];
      if (gs.end == 0) continue;
      for (size_t m = 0; m < s.dp_groups[g].size(); ++m)
        if (gs.join[m] && gs.join[m] <= gs.end)
          out.push_back({n.nodes[s.dp_groups[g][m]], "dp_sync", std::max(gs.join[m], lo), gs.end});
    }
  return out;
}

}  // namespace netprism::analysis
