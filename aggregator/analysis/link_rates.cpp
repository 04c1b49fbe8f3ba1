// Slow-link diagnosis, its measurement (link_rates.hpp): per direction and iteration the median rate of its
// transfers, the median of its comparable links (same role, other node pairs), their noise and the threshold.
#include "link_rates.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "diagnosis_steps.hpp"
#include "stats.hpp"

namespace netprism::analysis::diagnosis_steps {

double transfer_rate(const Xfer& x) {
  return static_cast<double>(x.bytes) / static_cast<double>(x.t1 - x.t0);
}

int iteration_of(const Timeline& t, uint64_t ns, size_t iters) {
  auto it = std::upper_bound(t.boundaries.begin(), t.boundaries.end(), ns);
  if (it == t.boundaries.begin()) return -1;
  size_t i = static_cast<size_t>(it - t.boundaries.begin()) - 1;
  return i < iters ? static_cast<int>(i) : -1;
}

double comparison_noise(const std::vector<double>& rates) {
  if (rates.size() < kNoiseMinPeers) return 0;
  std::vector<double> logs;
  logs.reserve(rates.size());
  for (double r : rates) logs.push_back(std::log(r));
  return small_sample_sigma(logs) * std::sqrt(1 + std::numbers::pi / (2 * static_cast<double>(rates.size())));
}

double cross_noise(const std::vector<double>& noise, const std::vector<double>& measured, size_t iters) {
  std::vector<double> v;
  for (size_t i = kWarmup; i < iters; ++i)
    if (measured[i] > 0 && noise[i] > 0) v.push_back(noise[i]);
  return median(std::move(v));
}

namespace {

// Each direction's transfers of at least kRateMinBytes in the view their rate is read from: the receiver's
// where its agent saw the data arrive (on a shaped or congested link the sender's departures come in quick
// bursts while the arrivals trickle in at the link's rate), else the sender's (CSV imports, a receiver
// without an agent). In time order per direction (each view's list is).
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

// Rates gathered through a hash index (a tree lookup per transfer costs a log factor on large jobs), then
// ordered by node pair so findings come out in a fixed order. Rates are one list sorted by direction and
// iteration (a vector for each cost 800,000 allocations, 66 MB, in a pass of the 1,000-agent load test).
// A transfer made from RDMA port counters shorter than two sampling intervals was given its interval's
// length (counters_source.cpp), so its rate is a lower bound (kept negative here): it serves in references
// (a reference read low only hides slowness), and a direction whose iteration has only such transfers is
// not judged in it. OpenMPI DP4's 4-6 ms exchanges read so put the pairs with half the bytes at 0.5x.
std::vector<Direction> directions(const Normalized& n, const std::vector<const Xfer*>& rated,
                                  const Structure& s, const Timeline& t, size_t iters) {
  auto bounded = [&](const Xfer& x) {
    return x.t1 - x.t0 < uint64_t{n.conns[x.conn].counters_interval_ms} * 2'000'000;
  };
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
      samples.emplace_back(uint32_t(it->second), uint32_t(i),
                           bounded(*x) ? -transfer_rate(*x) : transfer_rate(*x));
  }
  std::sort(samples.begin(), samples.end());
  std::vector<double> run;
  for (size_t a = 0, b = 0; a < samples.size(); a = b) {
    auto [dir, iter, unused] = samples[a];
    for (run.clear(), b = a;
         b < samples.size() && std::get<0>(samples[b]) == dir && std::get<1>(samples[b]) == iter; ++b)
      run.push_back(std::get<2>(samples[b]));
    auto measured = std::find_if(run.begin(), run.end(), [](double r) { return r > 0; });  // sorted: last
    if (measured != run.end()) {
      run.erase(run.begin(), measured);
    } else {
      dirs[dir].bound.resize(iters, 0);  // allocated at its first bound
      dirs[dir].bound[iter] = 1;
    }
    dirs[dir].rate[iter] = std::fabs(median(run));
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

// Per role: sigma of the iteration-to-iteration changes of its directions' log ratios (from kWarmup on);
// per direction, the larger of it and the direction's comparison noise, and the threshold it sets.
void thresholds(std::vector<Direction>& dirs, size_t iters) {
  std::map<EdgeRole, std::vector<double>> diffs;
  for (const Direction& d : dirs) {
    double prev = std::nan("");
    for (size_t i = kWarmup; i < iters; ++i) {
      if (d.rate[i] <= 0 || d.ref[i] <= 0 || d.bound_at(i)) continue;
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

}  // namespace

std::vector<Direction> measured_directions(const Normalized& n, const JobSlice& job, const Structure& s,
                                           const Timeline& t, size_t& iters) {
  iters = std::min(iters, t.boundaries.size() > 0 ? t.boundaries.size() - 1 : 0);
  if (iters <= kWarmup) return {};
  std::vector<Direction> dirs = directions(n, rated_transfers(job), s, t, iters);
  reference_rates(dirs, iters);
  thresholds(dirs, iters);
  return dirs;
}

}  // namespace netprism::analysis::diagnosis_steps
