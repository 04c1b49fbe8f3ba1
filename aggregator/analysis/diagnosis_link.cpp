// Diagnosis, slow link: a direction between two nodes whose transfers run slower than the comparable links
// of the job (same role) by a ratio that holds iteration after iteration.
//
// Per iteration, each direction's median transfer rate is compared with the median of the same role's
// directions between other node pairs in that iteration. Comparing within the iteration cancels what moves
// every link alike (a checkpoint pause, a job-wide stretch, host load that slows every rank); a degraded
// NIC or cable slows its own directions only, and does so in every iteration from its onset on. The rates,
// references and thresholds are measured in link_rates.cpp; this file decides the findings.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <set>

#include "debug_log.hpp"
#include "diagnosis_steps.hpp"
#include "link_rates.hpp"

namespace netprism::analysis::diagnosis_steps {
namespace {

// The first run of kLinkPersist consecutive measured iterations (from kWarmup on) below the threshold, and
// the per-iteration ratios from its start; onset -1 when there is none.
struct Run {
  int onset = -1;
  std::vector<std::pair<size_t, double>> ratios;  // iteration, rate / reference
};
Run degraded_run(const Direction& d, size_t iters) {
  Run r;
  size_t run = 0;
  for (size_t i = kWarmup; i < iters; ++i) {
    if (d.rate[i] <= 0 || d.ref[i] <= 0) continue;  // not measured: neither breaks nor extends a run
    double ratio = d.rate[i] / d.ref[i];
    // Only a lower bound (link_rates.hpp, Direction::bound): below the threshold it says nothing, above it
    // the direction was fast.
    if (d.bound_at(i) && ratio < d.threshold) continue;
    if (r.onset < 0) {
      run = ratio < d.threshold ? run + 1 : 0;
      if (run == 1) r.ratios.clear();
      if (run == 0) continue;
      r.ratios.emplace_back(i, ratio);
      if (run == kLinkPersist) r.onset = static_cast<int>(r.ratios.front().first);
    } else {
      r.ratios.emplace_back(i, ratio);
    }
  }
  if (r.onset < 0) r.ratios.clear();
  return r;
}

// What-if: the extra transfer time at the comparable rate, removed from the step.
double whatif_step(const std::vector<const Xfer*>& own, double ref, double step, size_t iters) {
  double extra = 0;
  for (const Xfer* x : own) {
    double at_ref = static_cast<double>(x->bytes) / ref;
    extra += std::max(0.0, static_cast<double>(x->t1 - x->t0) - at_ref);
  }
  double per_iter = extra / static_cast<double>(std::max<size_t>(iters, 1));
  return std::max(0.0, step - per_iter);
}

// What a finding's sigma is made of, for its evidence (a cross spread of 0: fewer than kNoiseMinPeers
// comparable links in every iteration).
std::string sigma_parts(double temporal, double cross) {
  if (cross <= 0)
    return " the job's iteration-to-iteration spread of log rate ratios (the comparable links' spread is not "
           "measured: fewer than " +
           std::to_string(kNoiseMinPeers) + " of them)";
  return " the larger of the job's iteration-to-iteration spread of log rate ratios (" +
         fmt("%.3f", temporal) + ") and the comparable links' spread around their median (" +
         fmt("%.3f", cross) + ")";
}

Finding link_finding(const Normalized& n, const Direction& d, const Run& r, const Timeline& t, size_t iters) {
  std::vector<double> ratios, refs, slow;
  std::string list;
  for (auto& [i, ratio] : r.ratios) {
    ratios.push_back(ratio);
    refs.push_back(d.ref[i]);
    if (ratio < d.threshold) slow.push_back(ratio);
    if (ratios.size() <= 12)
      list += (ratios.size() > 1 ? " " : "") + std::to_string(i) + ":" + fmt("%.2f", ratio);
  }
  if (ratios.size() > 12) list += " ...";
  auto onset = static_cast<size_t>(r.onset);
  double ref_i = d.ref[onset];
  uint64_t start = 0;  // the onset iteration's first transfer below the threshold
  for (const Xfer* x : d.own)
    if (iteration_of(t, x->t0, iters) == r.onset && transfer_rate(*x) < d.threshold * ref_i) {
      start = x->t0;
      break;
    }
  Finding f;
  f.kind = "slow_link";
  f.subject = n.nodes[d.src] + "->" + n.nodes[d.dst];
  f.first_iteration = r.onset;
  f.start_ns = start ? start : t.boundaries[onset];
  double med_ratio = median(ratios);
  f.severity = 1.0 / std::max(med_ratio, 1e-6);
  std::string role = d.role == EdgeRole::dp ? "DP" : "pipeline";
  f.evidence = "rate " + fmt("%.2fx", med_ratio) + " of the other " + role + " links of the job (median " +
               fmt("%.1f MB/s", median(refs) * 1e3) + ") in the iterations from " + std::to_string(r.onset) +
               ", below " + fmt("%.2fx", d.threshold) + " in " + std::to_string(slow.size()) + " of " +
               std::to_string(ratios.size()) +
               " (threshold min(0.70x, exp(-3 sigma)) = " + fmt("%.2fx", d.threshold) + ", sigma " +
               fmt("%.3f", d.sigma) + sigma_parts(d.temporal, d.cross) + "; " + std::to_string(kLinkPersist) +
               " consecutive iterations); per iteration " + list;
  // What-if over the iterations from the onset: their median step less their extra transfer time.
  std::vector<const Xfer*> from_onset;
  for (const Xfer* x : d.own)
    if (x->t0 >= t.boundaries[onset] && x->t0 < t.boundaries[iters]) from_onset.push_back(x);
  std::vector<uint64_t> bounds(t.boundaries.begin() + static_cast<long>(onset),
                               t.boundaries.begin() + static_cast<long>(iters) + 1);
  f.whatif_step_time_ms =
      whatif_step(from_onset, median(refs), median(spacings(bounds)), iters - onset) / 1e6;
  return f;
}

// A node's host link (its NIC and cable) slows every direction through the node, in and out, whichever
// peer is on the other end. Comparing a direction with the other node pairs of its role takes in the node's
// other slow directions: in a DP ring a node's in- and out-directions go to two different peers, so the
// reference of one holds the other (1 of 3), and the ratios read 0.5-0.8 for a 2x link (live, where both
// directions' arrivals are seen); and each slow direction raises a finding of its own, two findings for one
// fault. Per node, per iteration: every direction through the node against the median of the same role's
// directions *not* through it (at least two), and the node's ratio is the highest of them: all of its
// directions must be slow for the node to be (one slow peer pair slows only some, and a slow host link is
// then the peer's). Its noise and threshold as for directions (min(0.7, exp(-3 sigma)) over the job's node
// ratios), degraded in kLinkPersist consecutive measured iterations. Needs a node with directions to two
// peers or more (what the node's link has in common and a peer's does not) and two directions of each role
// elsewhere: not in a DP2 job alone. What the job's traffic cannot tell apart is the node's link from a
// switch link that every one of its directions crosses (a node whose peers are all under other leaves): with
// a topology file's switch lines, the fabric diagnosis (diagnosis_fabric.cpp) decides across jobs.
struct NodeLink {
  uint32_t node = 0;
  std::vector<size_t> dirs;   // the directions through the node
  std::vector<double> ratio;  // per iteration: the highest of its directions' ratios (0: unmeasured)
  std::vector<std::vector<double>> dir_ratio;  // per direction (as `dirs`), per iteration
  std::vector<double> ref;                     // per iteration: the reference of its first direction's role
  std::vector<double> noise;  // per iteration: the median of its directions' comparison noise
  double cross = 0;           // the median of `noise` over its measured iterations
};

constexpr size_t kNodeMinPeers = 2;

// Per role, per iteration: the rates (> 0) of all its directions, sorted, and, where they are more than
// kExactPeers, their comparison noise (a node's few directions barely move the spread of so many).
struct RoleRates {
  std::vector<std::vector<double>> sorted;
  std::vector<double> noise;
};
std::map<EdgeRole, RoleRates> sorted_rates(const std::vector<Direction>& dirs, size_t iters) {
  std::map<EdgeRole, RoleRates> out;
  for (const Direction& d : dirs) {
    auto& per_iter = out[d.role].sorted;
    per_iter.resize(iters);
    for (size_t i = 0; i < iters; ++i)
      if (d.rate[i] > 0) per_iter[i].push_back(d.rate[i]);
  }
  for (auto& [role, rr] : out) {
    rr.noise.assign(iters, 0);
    for (size_t i = 0; i < iters; ++i) {
      std::sort(rr.sorted[i].begin(), rr.sorted[i].end());
      if (rr.sorted[i].size() > kExactPeers) rr.noise[i] = comparison_noise(rr.sorted[i]);
    }
  }
  return out;
}

// The comparison noise of the rates of `all` without `mine` (both sorted; mine a part of all).
double noise_without(const RoleRates& rr, size_t i, const std::vector<double>& mine) {
  const std::vector<double>& all = rr.sorted[i];
  if (all.size() - mine.size() > kExactPeers) return rr.noise[i];
  std::vector<double> others;
  std::set_difference(all.begin(), all.end(), mine.begin(), mine.end(), std::back_inserter(others));
  return comparison_noise(others);
}

// One iteration of a node: each direction through it against the median of its role's directions not
// through it. The reference leaves out the node's own directions of the role from the role's sorted rates:
// a 1,000-node job (20,000 directions) took 44 s a pass when every direction re-collected the others.
void node_iteration(const std::vector<Direction>& dirs, const std::map<EdgeRole, RoleRates>& rates, size_t i,
                    NodeLink& nl) {
  std::map<EdgeRole, std::vector<double>> own;
  for (size_t k : nl.dirs)
    if (dirs[k].rate[i] > 0) own[dirs[k].role].push_back(dirs[k].rate[i]);
  for (auto& [role, v] : own) std::sort(v.begin(), v.end());
  double highest = 0;
  std::vector<double> noise;
  std::map<EdgeRole, double> role_noise;  // the same for every direction of a role: computed once
  for (size_t m = 0; m < nl.dirs.size(); ++m) {
    const Direction& d = dirs[nl.dirs[m]];
    if (d.rate[i] <= 0) continue;  // idle in this iteration: no evidence either way
    if (d.bound_at(i)) return;     // a lower bound: the node's highest ratio is not known
    const RoleRates& rr = rates.at(d.role);
    const std::vector<double>& all = rr.sorted[i];
    const std::vector<double>& mine = own[d.role];
    if (all.size() - mine.size() < 2) return;  // ratio stays 0: not measured
    double ref = median_without(all, mine);
    if (m == 0 || nl.ref[i] <= 0) nl.ref[i] = ref;
    nl.dir_ratio[m][i] = d.rate[i] / ref;
    highest = std::max(highest, nl.dir_ratio[m][i]);
    auto [it, fresh] = role_noise.try_emplace(d.role, 0.0);
    if (fresh) it->second = noise_without(rr, i, mine);
    noise.push_back(it->second);
  }
  nl.ratio[i] = highest;
  nl.noise[i] = median(std::move(noise));
}

std::vector<NodeLink> node_links(const std::vector<Direction>& dirs, size_t iters) {
  std::map<uint32_t, NodeLink> by_node;
  for (size_t k = 0; k < dirs.size(); ++k)
    for (uint32_t v : {dirs[k].src, dirs[k].dst}) {
      by_node[v].node = v;
      by_node[v].dirs.push_back(k);
    }
  const auto rates = sorted_rates(dirs, iters);
  std::vector<NodeLink> out;
  for (auto& [v, nl] : by_node) {
    std::set<uint32_t> peers;
    for (size_t k : nl.dirs) peers.insert(dirs[k].src == v ? dirs[k].dst : dirs[k].src);
    // Directions to one peer only: the node's link, the peer's and the path between them slow the same
    // directions; the pair comparison above names the pair.
    if (peers.size() < kNodeMinPeers) continue;
    nl.ratio.assign(iters, 0);
    nl.ref.assign(iters, 0);
    nl.dir_ratio.assign(nl.dirs.size(), std::vector<double>(iters, 0));
    nl.noise.assign(iters, 0);
    for (size_t i = kWarmup; i < iters; ++i) node_iteration(dirs, rates, i, nl);
    nl.cross = cross_noise(nl.noise, nl.ratio, iters);
    out.push_back(std::move(nl));
  }
  return out;
}

// The node ratios as directions of rate `ratio` against a reference of 1, so degraded_run() reads them, with
// the node's sigma (the larger of the job's node-ratio spread `temporal` and the node's comparison noise).
Direction as_direction(const NodeLink& nl, double temporal) {
  Direction d;
  d.rate = nl.ratio;
  d.ref.assign(nl.ratio.size(), 1.0);
  d.temporal = temporal;
  d.cross = nl.cross;
  d.sigma = std::max(temporal, nl.cross);
  d.threshold = std::min(kSlowLinkRatio, std::exp(-kLinkZ * d.sigma));
  return d;
}

// One finding for a node's host link: subject the node's slowest direction (the contract's subject is a node
// pair), evidence every direction's ratio.
Finding node_finding(const Normalized& n, const std::vector<Direction>& dirs, const NodeLink& nl,
                     const Run& r, const Direction& nd, const Timeline& t, size_t iters) {
  size_t slowest = 0;
  double slowest_ratio = 0;
  std::string each;
  for (size_t m = 0; m < nl.dirs.size(); ++m) {
    std::vector<double> v;
    for (size_t i = static_cast<size_t>(r.onset); i < iters; ++i)
      if (nl.dir_ratio[m][i] > 0) v.push_back(nl.dir_ratio[m][i]);
    double med = median(v);
    const Direction& d = dirs[nl.dirs[m]];
    each += std::string(each.empty() ? "" : ", ") + n.nodes[d.src] + "->" + n.nodes[d.dst] + " " +
            fmt("%.2fx", med);
    if (!v.empty() && (slowest_ratio == 0 || med < slowest_ratio)) slowest = m, slowest_ratio = med;
  }
  Direction d = dirs[nl.dirs[slowest]];
  d.ref = nl.ref;  // the what-if at the rate of the directions not through the node
  d.threshold = nd.threshold;
  d.sigma = nd.sigma;
  Run dr;
  dr.onset = r.onset;
  for (auto& [i, ratio] : r.ratios) dr.ratios.emplace_back(i, ratio);
  Finding f = link_finding(n, d, dr, t, iters);
  std::string list;
  for (size_t k = 0; k < r.ratios.size() && k < 12; ++k)
    list += (k ? " " : "") + std::to_string(r.ratios[k].first) + ":" + fmt("%.2f", r.ratios[k].second);
  if (r.ratios.size() > 12) list += " ...";
  f.evidence =
      "the link of " + n.nodes[nl.node] + " (or a switch link that all its traffic crosses): every " +
      "direction through it slower than the same role's directions not through it, from iteration " +
      std::to_string(r.onset) + " (" + each + "; the highest of them below " + fmt("%.2fx", nd.threshold) +
      " in " + std::to_string(kLinkPersist) +
      " consecutive iterations: threshold min(0.70x, exp(-3 sigma)), sigma " + fmt("%.3f", nd.sigma) +
      sigma_parts(nd.temporal, nd.cross) + "); per iteration, the highest " + list;
  return f;
}

// Every node's link: its ratios, its threshold (as a Direction) and its degraded run (onset -1: none).
struct NodeRun {
  NodeLink nl;
  Direction nd;
  Run r;
};
std::vector<NodeRun> node_runs(const std::vector<Direction>& dirs, size_t iters) {
  std::vector<NodeLink> nodes = node_links(dirs, iters);
  std::vector<double> diffs;
  for (const NodeLink& nl : nodes) {
    double prev = std::nan("");
    for (size_t i = kWarmup; i < iters; ++i) {
      if (nl.ratio[i] <= 0) continue;
      double l = std::log(nl.ratio[i]);
      if (!std::isnan(prev)) diffs.push_back(std::fabs(l - prev));
      prev = l;
    }
  }
  const double temporal = kMadToSigma * median(diffs) / std::sqrt(2.0);
  std::vector<NodeRun> out;
  for (NodeLink& nl : nodes) {
    Direction nd = as_direction(nl, temporal);
    Run r = degraded_run(nd, iters);
    out.push_back({std::move(nl), std::move(nd), std::move(r)});
  }
  return out;
}

// Nodes whose every direction is slow: their directions' own findings are replaced by one for the node.
void node_link_findings(const Normalized& n, const std::vector<Direction>& dirs, const Timeline& t,
                        size_t iters, std::vector<Finding>& out) {
  for (const NodeRun& nr : node_runs(dirs, iters)) {
    if (debug::lines_on()) {
      std::string l = "node link " + n.nodes[nr.nl.node] + ": threshold " + fmt("%.2f", nr.nd.threshold) +
                      " sigma " + fmt("%.3f", nr.nd.temporal) + " cross " + fmt("%.3f", nr.nl.cross) +
                      ", ratios";
      for (double x : nr.nl.ratio) l += " " + fmt("%.2f", x);
      debug::line(l);
    }
    if (nr.r.onset < 0) continue;
    const std::string& name = n.nodes[nr.nl.node];
    std::erase_if(out, [&](const Finding& f) {
      auto arrow = f.subject.find("->");
      return f.kind == "slow_link" && arrow != std::string::npos &&
             (f.subject.substr(0, arrow) == name || f.subject.substr(arrow + 2) == name);
    });
    out.push_back(node_finding(n, dirs, nr.nl, nr.r, nr.nd, t, iters));
  }
}

}  // namespace

void slow_link_findings(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                        size_t iters, std::vector<Finding>& out) {
  std::vector<Finding> links;
  std::vector<Direction> dirs = measured_directions(n, job, s, t, iters);
  for (const Direction& d : dirs) {
    Run r = degraded_run(d, iters);
    if (r.onset >= 0) links.push_back(link_finding(n, d, r, t, iters));
  }
  node_link_findings(n, dirs, t, iters, links);
  out.insert(out.end(), links.begin(), links.end());
}

}  // namespace netprism::analysis::diagnosis_steps

namespace netprism::analysis {

std::vector<DirectionState> direction_states(const Normalized& n, const JobSlice& job, const Structure& s,
                                             const Timeline& t, size_t iters) {
  using namespace diagnosis_steps;
  std::vector<DirectionState> out;
  std::vector<Direction> dirs = measured_directions(n, job, s, t, iters);
  // A direction through a node whose link is degraded is slow from the node's onset on (every direction
  // through the node is then): its own comparison can start later, its reference holding the node's other
  // slow direction (node_link_findings). A leaf's uplinks at half rate: a tenant's directions through the
  // leaf's node read 0.66-0.67 in one iteration against their threshold of 0.62 while the node's stayed below
  // its 0.68, and the fabric finding was dated 3 iterations late (1 of 8 fresh fabric_leaf runs).
  std::vector<int> node_onset(dirs.size(), -1);
  for (const NodeRun& nr : node_runs(dirs, iters))
    for (size_t k : nr.nl.dirs)
      if (nr.r.onset >= 0 && (node_onset[k] < 0 || nr.r.onset < node_onset[k])) node_onset[k] = nr.r.onset;
  for (size_t k = 0; k < dirs.size(); ++k) {
    const Direction& d = dirs[k];
    DirectionState st;
    st.src = n.nodes[d.src];
    st.dst = n.nodes[d.dst];
    int onset = degraded_run(d, iters).onset;
    if (node_onset[k] >= 0 && (onset < 0 || node_onset[k] < onset)) onset = node_onset[k];
    std::vector<double> ratios;
    for (size_t i = kWarmup; i < iters; ++i)
      if (d.rate[i] > 0 && d.ref[i] > 0) {
        ++st.measured;
        st.measured_at.push_back(t.boundaries[i]);
        if (onset < 0 || i >= static_cast<size_t>(onset)) ratios.push_back(d.rate[i] / d.ref[i]);
      }
    st.onset = onset;
    st.ratio = ratios.empty() ? 1.0 : median(ratios);
    st.start_ns = onset >= 0 ? t.boundaries[static_cast<size_t>(onset)] : 0;
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace netprism::analysis
