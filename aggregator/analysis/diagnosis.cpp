// Stage 5: job state and findings (straggler, slow_link, slow_iteration, hang), each with evidence.
//
// A node's own compute per iteration is measured from the network: every time it sends (a pipeline
// transfer, or its first DP transfer of the synchronisation, which marks the end of its backward pass), the
// time since it last had both its input (last transfer received) and its previous output done (last
// transfer sent) is compute it did. Waiting is excluded because a node that waits has not received its
// input yet. A straggler is a node whose compute exceeds that of its peers in the same stage (other DP
// replicas) — or, without replicas, its own earlier baseline — persistently.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "stages.hpp"

namespace netprism::analysis {
namespace {

// slow_iteration: robust z-score with k = 5 on median/MAD (1.4826 MAD estimates sigma for Gaussian noise;
// k = 5 gives ~3e-7 false alarms per healthy iteration) and at least 15 % above the median, so that the
// sub-percent noise of a very steady job cannot turn a 2 % wobble into a finding.
constexpr double kSlowIterK = 5.0;
constexpr double kSlowIterMinExcess = 0.15;
// The first two iterations seen carry warm-up (allocator growth, lazy initialisation, connection set-up);
// they are excluded from baselines and findings.
constexpr size_t kWarmup = 2;
// Straggler: extra compute of at least 10 % of a step over its peers, in at least 3 consecutive
// iterations. Scheduling noise on a shared host moves a node's compute by a few percent of a step and not
// persistently; a +30 % compute fault is three times the threshold; three iterations keep one-off pauses out
// and still name the node within the required three iterations.
constexpr double kStragglerExcess = 0.10;
constexpr size_t kPersist = 3;
// slow_link: median transfer rate below half the median of comparable links (same role in the same job),
// over transfers of at least 64 KiB (smaller ones are dominated by latency, not rate). Healthy links of one
// role differ by well under 2x; a link fault worth reporting (shaping, a degraded lane) is several times.
constexpr double kSlowLinkRatio = 0.5;
constexpr uint64_t kRateMinBytes = 64 * 1024;
// Hang: silence of max(2 steps, 1.5 s). The last traffic trails the hang's start by up to one step (peers
// finish what they can), so reporting 2 steps after the last traffic stays within the required
// max(3 steps, 2 s) + 2 s of the hang's start, with a second left for the daemon's refresh period; a
// running job is never silent for two whole steps.
constexpr double kHangSteps = 2.0;
constexpr uint64_t kHangMinNs = 1'500'000'000;
// A job whose connections were closed (FIN/RST) on at least half of them has ended: a normal exit closes
// all, a crash of one rank resets at least its own and its peers then exit.
constexpr double kEndedShare = 0.5;

std::string fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}

std::string ms(double ns) {
  return fmt("%.1f ms", ns / 1e6);
}

// First run of `kPersist` consecutive true values; -1 when none.
int first_run(const std::vector<char>& flags) {
  size_t run = 0;
  for (size_t i = 0; i < flags.size(); ++i) {
    run = flags[i] ? run + 1 : 0;
    if (run >= kPersist) return static_cast<int>(i + 1 - kPersist);
  }
  return -1;
}

// compute[i][v]: own compute of node v (index into job.nodes) in iteration i.
std::vector<std::vector<double>> own_compute(const Normalized& n, const JobSlice& job, const Structure& s,
                                             const Timeline& t) {
  size_t iters = t.boundaries.size() > 1 ? t.boundaries.size() - 1 : 0;
  std::vector<int> pos(n.nodes.size(), -1);
  for (size_t k = 0; k < job.nodes.size(); ++k) pos[job.nodes[k]] = static_cast<int>(k);
  std::vector<std::vector<double>> out(iters, std::vector<double>(job.nodes.size(), 0));
  // Events per node in time order: (time, kind) with kind 0 = received (t1), 1 = sent (t0, with its t1).
  struct Ev {
    uint64_t t;
    uint64_t t_end;
    bool send;
  };
  std::vector<std::vector<Ev>> ev(job.nodes.size());
  for (const Xfer& x : job.xfers) {
    if (s.stage_of[x.src] == s.stage_of[x.dst]) continue;  // DP traffic: only the join counts, added below
    ev[static_cast<size_t>(pos[x.src])].push_back({x.t0, x.t1, true});
    ev[static_cast<size_t>(pos[x.dst])].push_back({x.t1, x.t1, false});
  }
  for (size_t i = 0; i < t.syncs.size(); ++i)
    for (size_t g = 0; g < s.dp_groups.size(); ++g)
      for (size_t m = 0; m < s.dp_groups[g].size(); ++m)
        if (!t.syncs[i][g].join.empty() && t.syncs[i][g].join[m])
          ev[static_cast<size_t>(pos[s.dp_groups[g][m]])].push_back(
              {t.syncs[i][g].join[m], t.syncs[i][g].end, true});
  for (size_t k = 0; k < ev.size(); ++k) {
    auto& e = ev[k];
    std::sort(e.begin(), e.end(), [](const Ev& a, const Ev& b) { return a.t < b.t; });
    uint64_t last_in = 0, last_out = 0;
    for (const Ev& x : e) {
      if (!x.send) {
        last_in = std::max(last_in, x.t);
        continue;
      }
      auto it = std::upper_bound(t.boundaries.begin(), t.boundaries.end(), x.t);
      if (it == t.boundaries.begin() || it == t.boundaries.end()) {
        last_out = std::max(last_out, x.t_end);
        continue;
      }
      size_t i = static_cast<size_t>(it - t.boundaries.begin()) - 1;
      uint64_t ready = std::max({last_in, last_out, t.boundaries[i]});
      if (x.t > ready) out[i][k] += static_cast<double>(x.t - ready);
      last_out = std::max(last_out, x.t_end);
    }
  }
  return out;
}

}  // namespace

std::string job_state(const Normalized& n, const JobSlice& job, double step_ns, size_t iterations) {
  uint64_t now_ns = n.now_ns;
  size_t closed = 0;
  for (uint32_t c : job.conns) closed += n.conns[c].closed ? 1 : 0;
  if (!job.conns.empty() &&
      static_cast<double>(closed) >= kEndedShare * static_cast<double>(job.conns.size()))
    return "ended";
  // Sources without TCP flags (flow CSV): a normal exit still shows as the teardown of every connection of
  // the job at once: the ones idle since start-up (all-pairs process-group connections, the rendezvous
  // store) carry their last packets after the last training transfer. A hang leaves them silent.
  {
    std::vector<char> in_job(n.nodes.size(), 0), training(n.conns.size(), 0);
    for (uint32_t v : job.nodes) in_job[v] = 1;
    for (uint32_t c : job.conns) training[c] = 1;
    size_t idle = 0, woke = 0;
    for (size_t c = 0; c < n.conns.size(); ++c) {
      const Conn& k = n.conns[c];
      if (training[c] || !in_job[k.a] || !in_job[k.b] || k.first_ns > job.first_ns) continue;
      ++idle;
      woke += k.last_ns > job.last_ns ? 1 : 0;
    }
    if (idle > 0 && static_cast<double>(woke) >= kEndedShare * static_cast<double>(idle)) return "ended";
  }
  // A recording: periodic traffic that stopped without a teardown stopped for good (see Input::offline).
  if (n.offline) return iterations >= 2 ? "hung" : "idle";
  uint64_t quiet = now_ns > job.last_ns ? now_ns - job.last_ns : 0;
  double hang_after = std::max(kHangSteps * step_ns, static_cast<double>(kHangMinNs));
  if (step_ns > 0 && static_cast<double>(quiet) > hang_after) return "hung";
  // No period yet (fewer than two iterations): silence is idleness, not a hang.
  if (step_ns <= 0 && quiet > kHangMinNs) return "idle";
  return "running";
}

std::vector<Finding> diagnose(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                              const std::vector<Iteration>& its, const std::string& state, uint64_t now_ns,
                              const std::string& job_id) {
  std::vector<Finding> out;
  double step = t.step_ns;
  size_t iters = its.size();

  // --- slow_iteration
  if (iters > kWarmup + 2) {
    std::vector<double> d;
    for (size_t i = kWarmup; i < iters; ++i) d.push_back(static_cast<double>(its[i].duration_ns));
    double med = median(d), sig = 1.4826 * mad(d, med);
    double thr = med + std::max(kSlowIterK * sig, kSlowIterMinExcess * med);
    for (size_t i = kWarmup; i < iters;) {
      if (static_cast<double>(its[i].duration_ns) <= thr) {
        ++i;
        continue;
      }
      size_t j = i;
      double worst = 0;
      while (j<iters&& static_cast<double>(its[j].duration_ns)> thr)
        worst = std::max(worst, static_cast<double>(its[j++].duration_ns));
      Finding f;
      f.kind = "slow_iteration";
      f.subject = job_id;
      f.first_iteration = static_cast<int>(i);
      f.start_ns = its[i].start_ns;
      f.severity = worst / med;
      f.evidence = "iterations " + std::to_string(i) + "-" + std::to_string(j - 1) + ": longest " +
                   ms(worst) + " vs median " + ms(med) + " (MAD sigma " + ms(sig) + "; threshold " + ms(thr) +
                   " = median + max(5 sigma, 15 %))";
      out.push_back(std::move(f));
      i = j;
    }
  }

  // --- straggler
  if (iters > kWarmup + kPersist && step > 0) {
    auto comp = own_compute(n, job, s, t);
    std::vector<int> pos(n.nodes.size(), -1);
    for (size_t k = 0; k < job.nodes.size(); ++k) pos[job.nodes[k]] = static_cast<int>(k);
    for (size_t k = 0; k < job.nodes.size(); ++k) {
      uint32_t v = job.nodes[k];
      const auto& stage = s.stages[static_cast<size_t>(s.stage_of[v])];
      std::vector<size_t> peers;
      for (uint32_t u : stage)
        if (u != v) peers.push_back(static_cast<size_t>(pos[u]));
      // Baseline for a node without same-stage peers: its own median over the first third after warm-up.
      double own_base = 0;
      if (peers.empty()) {
        std::vector<double> b;
        for (size_t i = kWarmup; i < kWarmup + std::max<size_t>(kPersist, (iters - kWarmup) / 3) && i < iters;
             ++i)
          b.push_back(comp[i][k]);
        own_base = median(b);
      }
      std::vector<char> flag(iters, 0);
      std::vector<double> excess(iters, 0);
      for (size_t i = kWarmup; i < iters; ++i) {
        double ref = own_base;
        if (!peers.empty()) {
          std::vector<double> pv;
          for (size_t p : peers) pv.push_back(comp[i][p]);
          ref = median(pv);
        }
        excess[i] = comp[i][k] - ref;
        flag[i] = excess[i] >= kStragglerExcess * step;
      }
      int first = first_run(flag);
      if (first < 0) continue;
      std::vector<double> ex, whatif;
      for (size_t i = static_cast<size_t>(first); i < iters; ++i)
        if (flag[i]) {
          ex.push_back(excess[i]);
          whatif.push_back(static_cast<double>(its[i].duration_ns) - excess[i]);
        }
      Finding f;
      f.kind = "straggler";
      f.subject = n.nodes[v];
      f.first_iteration = first;
      f.start_ns = its[static_cast<size_t>(first)].start_ns;
      double mex = median(ex);
      f.severity = mex / step;
      f.whatif_step_time_ms = median(whatif) / 1e6;
      std::string ref = peers.empty() ? "its own baseline (median " + ms(own_base) + ")"
                                      : std::to_string(peers.size()) + " same-stage peer(s)";
      f.evidence = "own compute exceeds " + ref + " by a median " + ms(mex) + " (" +
                   fmt("%.0f", 100 * mex / step) + " % of the " + ms(step) + " step) in " +
                   std::to_string(ex.size()) + " iterations from " + std::to_string(first) +
                   "; threshold 10 % of a step in 3 consecutive iterations";
      out.push_back(std::move(f));
    }
  }

  // --- slow_link
  {
    struct Link {
      std::vector<double> rates;
      EdgeRole role = EdgeRole::dp;
      uint64_t first_slow_t = 0;
    };
    std::map<std::pair<uint32_t, uint32_t>, Link> links;
    for (const Xfer& x : job.xfers) {
      if (x.bytes < kRateMinBytes || x.t1 <= x.t0) continue;
      Link& l = links[{x.src, x.dst}];
      l.role = s.stage_of[x.src] == s.stage_of[x.dst] ? EdgeRole::dp : EdgeRole::pp;
      l.rates.push_back(static_cast<double>(x.bytes) / static_cast<double>(x.t1 - x.t0));
    }
    std::map<EdgeRole, std::vector<double>> by_role;
    std::map<std::pair<uint32_t, uint32_t>, double> med_rate;
    for (auto& [k, l] : links) {
      med_rate[k] = median(l.rates);
      by_role[l.role].push_back(med_rate[k]);
    }
    for (auto& [k, l] : links) {
      auto& peers = by_role[l.role];
      if (peers.size() < 3) continue;  // "much slower than comparable pairs" needs at least two others
      double ref = median(peers);
      if (med_rate[k] >= kSlowLinkRatio * ref) continue;
      // When it began: first transfer on it below the threshold rate that starts a run of three.
      std::vector<char> flags;
      std::vector<uint64_t> times;
      for (const Xfer& x : job.xfers)
        if (x.src == k.first && x.dst == k.second && x.bytes >= kRateMinBytes && x.t1 > x.t0) {
          flags.push_back(static_cast<double>(x.bytes) / static_cast<double>(x.t1 - x.t0) <
                          kSlowLinkRatio * ref);
          times.push_back(x.t0);
        }
      int fr = first_run(flags);
      uint64_t start = fr >= 0 ? times[static_cast<size_t>(fr)] : times.front();
      Finding f;
      f.kind = "slow_link";
      f.subject = n.nodes[k.first] + "->" + n.nodes[k.second];
      auto it = std::upper_bound(t.boundaries.begin(), t.boundaries.end(), start);
      f.first_iteration = it == t.boundaries.begin() ? 0 : static_cast<int>(it - t.boundaries.begin()) - 1;
      f.first_iteration = std::min(f.first_iteration, std::max(0, static_cast<int>(iters) - 1));
      f.start_ns = start;
      f.severity = ref / med_rate[k];
      f.evidence = "median rate " + fmt("%.1f MB/s", med_rate[k] * 1e3) + " vs " +
                   fmt("%.1f MB/s", ref * 1e3) + " median of " + std::to_string(peers.size()) + " " +
                   (l.role == EdgeRole::dp ? "DP" : "pipeline") + " links of the job (threshold 0.5x)";
      // What-if: the extra transfer time at the comparable rate, removed from the step.
      double extra = 0;
      size_t cnt = 0;
      for (const Xfer& x : job.xfers)
        if (x.src == k.first && x.dst == k.second && x.t1 > x.t0) {
          double at_ref = static_cast<double>(x.bytes) / ref;
          extra += std::max(0.0, static_cast<double>(x.t1 - x.t0) - at_ref);
          ++cnt;
        }
      if (iters > 0 && step > 0) {
        double per_iter = extra / static_cast<double>(std::max<size_t>(iters, 1));
        f.whatif_step_time_ms = std::max(0.0, step - per_iter) / 1e6;
      }
      (void)cnt;
      out.push_back(std::move(f));
    }
  }

  // --- hang
  if (state == "hung") {
    std::map<uint32_t, uint64_t> last_send;
    for (const Xfer& x : job.xfers) last_send[x.src] = std::max(last_send[x.src], x.t1);
    std::vector<std::pair<uint64_t, uint32_t>> order;
    for (auto& [v, tt] : last_send) order.emplace_back(tt, v);
    std::sort(order.begin(), order.end());
    Finding f;
    f.kind = "hang";
    f.subject = job_id;
    f.start_ns = job.last_ns;
    // The node that went silent first, when it stopped clearly before the others (a tenth of a step: the
    // others keep sending what they can until they block on it).
    if (order.size() >= 2 && static_cast<double>(order[1].first - order[0].first) > 0.1 * step) {
      f.subject = n.nodes[order[0].second];
      f.start_ns = order[0].first;
    }
    f.first_iteration = static_cast<int>(iters);
    f.severity = static_cast<double>(now_ns - job.last_ns) / std::max(step, 1.0);
    f.evidence = "no training traffic for " + ms(static_cast<double>(now_ns - job.last_ns)) + " (step " +
                 ms(step) + ", threshold max(2 steps, 1.5 s)) while its connections stay open";
    if (n.offline) {
      f.severity = 1;
      f.evidence = "the recording's periodic traffic stops after " + std::to_string(iters) +
                   " iterations (step " + ms(step) + ") without the connections being torn down";
    }
    if (f.subject != job_id)
      f.evidence += "; " + f.subject + " sent last at " + std::to_string(order[0].first) + ", " +
                    ms(static_cast<double>(order[1].first - order[0].first)) + " before the next node";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace netprism::analysis
