// Diagnosis, slow link: a direction between two nodes whose transfers run slower than the comparable links
// of the job (same role) by a ratio that holds iteration after iteration.
//
// Per iteration, each direction's median transfer rate is compared with the median of the same role's
// directions between other node pairs in that iteration. Comparing within the iteration cancels what moves
// every link alike (a checkpoint pause, a job-wide stretch, host load that slows every rank); a degraded
// NIC or cable slows its own directions only, and does so in every iteration from its onset on.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <numbers>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "debug_log.hpp"
#include "diagnosis_steps.hpp"

namespace netprism::analysis::diagnosis_steps {
namespace {

// An iteration is degraded for a direction when its rate is below 0.7 of its comparable links' median and
// further below it than the job's own rate noise allows: exp(-3 sigma), sigma the robust
// iteration-to-iteration spread of the job's log rate ratios (kMadToSigma x MAD of consecutive differences /
// sqrt 2; a lasting fault moves a direction's ratio once, at its onset, so it barely widens sigma, while a
// host whose transfers are paced by its CPU rather than its links scatters them in every iteration). A slow
// link is degraded in kLinkPersist = 4 consecutive measured iterations, and is reported after the 4th (the
// detection delay). Measured over the alarms campaign's 44 fresh testbed runs and the 18 kept samples
// (tests/e2e/alarms.py; docs/analysis.md, "Diagnosis"), as the weakest ratio of the consecutive iterations a
// finding needs:
// - healthy and benign runs, 3 iterations: z = -3.02 at worst (ratio 0.50, sigma 0.23: the unshaped veths of
//   the OpenMPI DP4 sample, whose rates follow the CPU); 4 iterations: -2.19 at worst.
// - a host link at half its peers' line rate, 4 iterations: z = -3.9 to -4.6 where the only comparable links
//   are one other pair (DP2 x PP2), -6.3 to -12 elsewhere (ratios 0.46-0.56, sigma 0.06-0.16).
// 3 sigma over 4 iterations lies between the two (1.37x beyond the worst healthy case, 1.29x short of the
// weakest 2x link); over 3 iterations no z separates them with margin. The 0.7 floor keeps a steady job's
// small sigma (0.03-0.08 on links running at line rate) from turning a 20 % wobble into a fault. So a 2x slow
// link is found where sigma < ln 2 / 3 = 0.23; on CPU-paced hosts only links slower than exp(-3 sigma).
// That spread over time missed a host starved of CPU for several iterations (OpenMPI DP4 beside CPU burners:
// a direction or node at 0.22-0.51 of its comparable links against thresholds 0.53-0.63; false slow_links in
// 2 of one campaign batch's 44 runs, 3 of 10 fresh runs of that shape). So sigma is the larger of it and the
// comparison noise, the spread of the direction's own comparable links (comparison_noise()): 0.04-0.08 at a
// line rate (thresholds unchanged), 0.41-1.06 where the hosts' CPUs pace them (docs/analysis.md has it).
constexpr double kSlowLinkRatio = 0.7;
constexpr double kLinkZ = 3.0;
constexpr size_t kLinkPersist = 4;
// Transfers of at least 64 KiB carry a rate; smaller ones are dominated by latency, not rate.
constexpr uint64_t kRateMinBytes = 64 * 1024;
// Comparable links needed to measure their spread. Of two or three, the MAD rests on one or two deviations
// and one slow link among them is half of them: on the fabric campaign's DP4 rings (3 comparable links per
// direction) a 6 % gap between two healthy links at line rate read as noise 0.17 (threshold 0.60), and with
// a leaf's uplinks at half rate (ratios 0.55-0.62) the fabric finding was lost in 4 of 5 fresh runs. Four or
// more: one slow link among them does not move the MAD (the CPU-paced OpenMPI DP4: 6 per direction, 4 per
// node). Below it the spread over time alone sets sigma, as before.
constexpr size_t kNoiseMinPeers = 4;
// Roles with more directions than this compare with the role's median over all of them (excluding one pair
// moves the median of so many by at most one rank) to stay linear in the job's size.
constexpr size_t kExactPeers = 16;

// Each direction's transfers in the view its rate is read from. A direction's rate is read from the
// receiver's view where its agent saw the data arrive: on a shaped or congested link the sender's data
// leaves as fast as its congestion window allows and queues on the way, so its departures come in quick
// bursts while the arrivals trickle in at the link's rate. Without arrivals (CSV imports, a receiver
// without an agent) the sender's view is all there is. In time order per direction (each view's list is).
uint64_t direction_key(const Xfer& x) {
  return uint64_t{x.src} << 32 | x.dst;
}
std::vector<const Xfer*> rated_transfers(const JobSlice& job) {
  std::unordered_set<uint64_t> arriving;
  for (const Xfer& x : job.arrivals) arriving.insert(direction_key(x));
  std::vector<const Xfer*> rated;
  for (const auto* list : {&job.arrivals, &job.xfers})
    for (const Xfer& x : *list)
      if ((list == &job.arrivals) == (arriving.count(direction_key(x)) > 0) && x.bytes >= kRateMinBytes &&
          x.t1 > x.t0)
        rated.push_back(&x);
  return rated;
}

double rate(const Xfer& x) {
  return static_cast<double>(x.bytes) / static_cast<double>(x.t1 - x.t0);
}

// The iteration a time falls in; -1 outside the timeline.
int iteration_of(const Timeline& t, uint64_t ns, size_t iters) {
  auto it = std::upper_bound(t.boundaries.begin(), t.boundaries.end(), ns);
  if (it == t.boundaries.begin()) return -1;
  size_t i = static_cast<size_t>(it - t.boundaries.begin()) - 1;
  return i < iters ? static_cast<int>(i) : -1;
}

// One direction: its role, its transfers and its median rate per iteration (0: none measured), and per
// iteration the median of the comparable directions (0: fewer than two).
struct Direction {
  uint32_t src = 0, dst = 0;
  EdgeRole role = EdgeRole::dp;
  std::vector<const Xfer*> own;
  std::vector<double> rate, ref;
  std::vector<double> noise;          // per iteration: comparison_noise() of its reference's rates
  double threshold = kSlowLinkRatio;  // min(kSlowLinkRatio, exp(-kLinkZ sigma))
  double sigma = 0;                   // max(temporal, cross)
  double temporal = 0;                // its role's iteration-to-iteration spread of log ratios
  double cross = 0;                   // the median of `noise` over its measured iterations
};

// The noise of comparing one link's rate with the median of n comparable links' rates: how far the
// comparable links themselves sit from one another (the robust sigma of their log rates), widened by the
// uncertainty of their median (its variance is about pi / (2n) of theirs). A link at half of a reference
// that spreads over a factor of 2-6 is no slower than its comparable links are from one another (values
// measured: the header comment). 0 for fewer than kNoiseMinPeers.
double comparison_noise(const std::vector<double>& rates) {
  if (rates.size() < kNoiseMinPeers) return 0;
  std::vector<double> logs;
  logs.reserve(rates.size());
  for (double r : rates) logs.push_back(std::log(r));
  return small_sample_sigma(logs) * std::sqrt(1 + std::numbers::pi / (2 * static_cast<double>(rates.size())));
}

// Rates gathered through a hash index (a tree lookup per transfer costs a log factor on large jobs), then
// ordered by node pair so findings come out in a fixed order. Rates are one list sorted by direction and
// iteration (a vector for each cost 800,000 allocations, 66 MB, in a pass of the 1,000-agent load test).
std::vector<Direction> directions(const std::vector<const Xfer*>& rated, const Structure& s,
                                  const Timeline& t, size_t iters) {
  std::unordered_map<uint64_t, size_t> index;
  std::vector<Direction> dirs;
  std::vector<std::tuple<uint32_t, uint32_t, double>> samples;  // (direction, iteration, rate): 16 B
  samples.reserve(rated.size());
  for (const Xfer* x : rated) {
    auto [it, fresh] = index.emplace(direction_key(*x), dirs.size());
    if (fresh) {
      Direction& d = dirs.emplace_back();
      std::tie(d.src, d.dst) = std::pair(x->src, x->dst);
      d.role = s.stage_of[x->src] == s.stage_of[x->dst] ? EdgeRole::dp : EdgeRole::pp;
      d.ref = d.noise = d.rate = std::vector<double>(iters);  // 0: not measured
    }
    dirs[it->second].own.push_back(x);
    if (int i = iteration_of(t, x->t0, iters); i >= 0)
      samples.emplace_back(uint32_t(it->second), uint32_t(i), rate(*x));
  }
  std::sort(samples.begin(), samples.end());
  std::vector<double> run;
  for (size_t a = 0, b = 0; a < samples.size(); a = b) {
    auto [dir, iter, unused] = samples[a];
    for (run.clear(), b = a;
         b < samples.size() && std::get<0>(samples[b]) == dir && std::get<1>(samples[b]) == iter; ++b)
      run.push_back(std::get<2>(samples[b]));
    dirs[dir].rate[iter] = median(run);
  }
  std::sort(dirs.begin(), dirs.end(), [](const Direction& a, const Direction& b) {
    return std::tie(a.src, a.dst) < std::tie(b.src, b.dst);
  });
  return dirs;
}

// Per direction and iteration: the median rate of the same role's directions between other node pairs.
void reference_rates(std::vector<Direction>& dirs, size_t iters) {
  std::map<EdgeRole, std::vector<size_t>> by_role;
  for (size_t k = 0; k < dirs.size(); ++k) by_role[dirs[k].role].push_back(k);
  for (auto& [role, members] : by_role) {
    for (size_t i = 0; i < iters; ++i) {
      std::vector<double> all;
      for (size_t k : members)
        if (dirs[k].rate[i] > 0) all.push_back(dirs[k].rate[i]);
      if (members.size() > kExactPeers) {
        double role_median = all.size() > 2 ? median(all) : 0;
        double role_noise = role_median > 0 ? comparison_noise(all) : 0;
        for (size_t k : members)
          std::tie(dirs[k].ref[i], dirs[k].noise[i]) = std::pair(role_median, role_noise);
        continue;
      }
      for (size_t k : members) {
        std::vector<double> others;
        for (size_t o : members) {
          bool same_pair = (dirs[o].src == dirs[k].src && dirs[o].dst == dirs[k].dst) ||
                           (dirs[o].src == dirs[k].dst && dirs[o].dst == dirs[k].src);
          if (!same_pair && dirs[o].rate[i] > 0) others.push_back(dirs[o].rate[i]);
        }
        if (others.size() < 2) continue;
        dirs[k].ref[i] = median(others);
        dirs[k].noise[i] = comparison_noise(others);
      }
    }
  }
}

// The median of a direction's (or node's) per-iteration comparison noise over the iterations it is measured
// in (its rate or ratio > 0, from kWarmup on).
double cross_noise(const std::vector<double>& noise, const std::vector<double>& measured, size_t iters) {
  std::vector<double> v;
  for (size_t i = kWarmup; i < iters; ++i)
    if (measured[i] > 0 && noise[i] > 0) v.push_back(noise[i]);
  return median(std::move(v));
}

// Per role: sigma of the iteration-to-iteration changes of its directions' log ratios (from kWarmup on);
// per direction, the larger of it and the direction's comparison noise, and the threshold it sets.
void thresholds(std::vector<Direction>& dirs, size_t iters) {
  std::map<EdgeRole, std::vector<double>> diffs;
  for (const Direction& d : dirs) {
    double prev = std::nan("");
    for (size_t i = kWarmup; i < iters; ++i) {
      if (d.rate[i] <= 0 || d.ref[i] <= 0) continue;
      double l = std::log(d.rate[i] / d.ref[i]);
      if (!std::isnan(prev)) diffs[d.role].push_back(std::fabs(l - prev));
      prev = l;
    }
  }
  // Once per role: the median sorts all of the role's changes (directions x iterations; per direction it
  // took most of a 1,000-node job's 15 s pass).
  std::map<EdgeRole, double> sigma;
  for (const auto& [role, v] : diffs) sigma[role] = kMadToSigma * median(v) / std::sqrt(2.0);
  for (Direction& d : dirs) {
    d.temporal = sigma[d.role];
    d.cross = cross_noise(d.noise, d.rate, iters);
    d.sigma = std::max(d.temporal, d.cross);
    d.threshold = std::min(kSlowLinkRatio, std::exp(-kLinkZ * d.sigma));
  }
}

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
    if (iteration_of(t, x->t0, iters) == r.onset && rate(*x) < d.threshold * ref_i) {
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

// Every rated direction with its rates, references and threshold; iters clamped to the timeline.
std::vector<Direction> measured_directions(const JobSlice& job, const Structure& s, const Timeline& t,
                                           size_t& iters) {
  iters = std::min(iters, t.boundaries.size() > 0 ? t.boundaries.size() - 1 : 0);
  if (iters <= kWarmup) return {};
  std::vector<Direction> dirs = directions(rated_transfers(job), s, t, iters);
  reference_rates(dirs, iters);
  thresholds(dirs, iters);
  return dirs;
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
  std::vector<Direction> dirs = measured_directions(job, s, t, iters);
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
  std::vector<Direction> dirs = measured_directions(job, s, t, iters);
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
