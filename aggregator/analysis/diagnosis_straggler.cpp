// Diagnosis, straggler: which pipeline (replica) is persistently late, and which of its nodes is the slow
// one.
//
// A node's own compute per iteration is measured from the network: every time it sends (a pipeline
// transfer, or its first DP transfer of the synchronisation, which marks the end of its backward pass), the
// time since it last had both its input (last transfer received) and its previous output done (last
// transfer sent) is compute it did. Waiting is excluded because a node that waits has not received its
// input yet. A straggler is a node whose compute exceeds that of its peers in the same stage (other DP
// replicas) — or, without replicas, its own earlier baseline — persistently.
#include <algorithm>
#include <cmath>

#include "debug_log.hpp"
#include "diagnosis_steps.hpp"

namespace netprism::analysis::diagnosis_steps {
namespace {

// Straggler: extra compute of at least 10 % of a step over its peers, in at least kPersist (3) consecutive
// iterations. Scheduling noise on a shared host moves a node's compute by a few percent of a step and not
// persistently; a +30 % compute fault is three times the threshold; three iterations keep one-off pauses out
// and still name the node within the required three iterations.
constexpr double kStragglerExcess = 0.10;
// On a loaded host the scheduling noise in a member's join reaches the threshold itself (measured: a 1.3x
// straggler on a host at load ~14 joined 34-172 ms after its peer, step 600 ms, so rarely three times in a
// row above 60 ms, while healthy members also strayed up to 130 ms once). The same member being the later
// one every time is the persistent signature instead: a window of kSignWindow iterations in which it joins
// after its peers in every one (by chance 1 in 2^5 = 32 for a pair of equals, and the median lateness must
// still reach the 10 % threshold, which a chance run of small leads does not).
constexpr size_t kSignWindow = 5;
// The lateness threshold rises above 10 % of a step where the job's own join noise is larger: kLateZ = 2
// sigma (change_sigma of every pipeline's lateness). Measured: sigma stayed under 37 ms in every kept sample
// and alarms campaign run but one, a healthy DP2 x PP2 GPipe run beside 3 CPU burners (sigma 74 ms) whose
// second replica joined 57-184 ms late in 7 consecutive iterations: a lateness the CPU made, which the
// network cannot tell from a slow GPU, above 10 % of its 636 ms step but under its 149 ms (2 sigma). The 1.3x
// straggler recorded under load (straggler_loaded) is late by a median 99.8 ms against its 65.9 ms (2 sigma).
constexpr double kLateZ = 2.0;
// A pipeline without replicas has no peer to be compared with in the same iteration, only its own earlier
// steps, which a stretch of the whole job moves too: host contention that comes and goes made a healthy PP4
// run's steps +18 % in 3 consecutive iterations (load average 24 on the 2 cores), with a compute-span reading
// of its first stage of x1.70 (its inputs timed at their senders, the wake-up delay counted as compute). So
// there the step excess must last kSignWindow (5) iterations: the detection delay of a single pipeline.

// unit[i][k]: the median compute span of node job.nodes[k] in iteration i: over its pipeline sends, the
// time since its previous send or, when it received something after that send, since the first such
// message (what it was waiting for: a node that waits starts computing when its input arrives; a busy
// node's inputs are already queued, and messages landing in the middle of its compute must not cut the
// span short). So a span is compute, not waiting (one micro-batch's forward or backward; the first stage's
// first forward of an iteration also holds the synchronisation, the median ignores it). Comparing a node with
// its same-stage DP peers, or with its own earlier iterations, tells which node of a late pipeline is the
// slow one. Messages under a quarter of the job's typical pipeline message (barriers, notifications) are not
// inputs or outputs. 0 = not seen.
std::vector<std::vector<double>> unit_compute(const Normalized& n, const JobSlice& job, const Structure& s,
                                              const Timeline& t) {
  size_t iters = t.boundaries.size() > 1 ? t.boundaries.size() - 1 : 0;
  std::vector<int> pos(n.nodes.size(), -1);
  for (size_t k = 0; k < job.nodes.size(); ++k) pos[job.nodes[k]] = static_cast<int>(k);
  std::vector<double> sizes;
  for (const Xfer& x : job.xfers)
    if (s.stage_of[x.src] != s.stage_of[x.dst]) sizes.push_back(static_cast<double>(x.bytes));
  double min_bytes = 0.25 * typical_size(sizes);
  struct Ev {
    uint64_t t;
    bool send;
  };
  std::vector<std::vector<Ev>> ev(job.nodes.size());
  for (const Xfer& x : job.xfers) {
    if (s.stage_of[x.src] == s.stage_of[x.dst] || static_cast<double>(x.bytes) < min_bytes) continue;
    ev[static_cast<size_t>(pos[x.src])].push_back({x.t0, true});
    ev[static_cast<size_t>(pos[x.dst])].push_back({x.t1, false});
  }
  std::vector<std::vector<std::vector<double>>> spans(iters,
                                                      std::vector<std::vector<double>>(job.nodes.size()));
  for (size_t k = 0; k < ev.size(); ++k) {
    auto& e = ev[k];
    std::sort(e.begin(), e.end(), [](const Ev& a, const Ev& b) { return a.t < b.t; });
    uint64_t last_send = 0, first_recv = 0;  // first receive since the last send
    for (const Ev& x : e) {
      if (!x.send) {
        if (!first_recv) first_recv = x.t;
        continue;
      }
      uint64_t from = std::max(last_send, first_recv);
      if (last_send && x.t > from) {
        auto it = std::upper_bound(t.boundaries.begin(), t.boundaries.end(), x.t);
        if (it != t.boundaries.begin() && it != t.boundaries.end())
          spans[static_cast<size_t>(it - t.boundaries.begin()) - 1][k].push_back(
              static_cast<double>(x.t - from));
      }
      last_send = x.t;
      first_recv = 0;
    }
  }
  std::vector<std::vector<double>> out(iters, std::vector<double>(job.nodes.size(), 0));
  for (size_t i = 0; i < iters; ++i)
    for (size_t k = 0; k < job.nodes.size(); ++k) out[i][k] = median(spans[i][k]);
  return out;
}

// Pipelines (replicas): chains over pipeline edges from each first-stage node.
struct Chains {
  std::vector<std::vector<size_t>> chains;  // positions in job.nodes, first stage first
  std::vector<int> chain_of;                // per node index: its chain, -1: none
};
Chains pipeline_chains(const Normalized& n, const JobSlice& job, const Structure& s,
                       const std::vector<int>& pos) {
  std::vector<std::vector<uint32_t>> down(n.nodes.size());
  for (const auto& e : s.edges)
    if (e.role == EdgeRole::pp) down[e.u].push_back(e.v);
  Chains ch;
  ch.chain_of.assign(n.nodes.size(), -1);
  for (uint32_t v : job.nodes)
    if (s.stage_of[v] == 0) {
      std::vector<size_t> c{static_cast<size_t>(pos[v])};
      for (uint32_t cur = v; down[cur].size() == 1; cur = down[cur][0])
        c.push_back(static_cast<size_t>(pos[down[cur][0]]));
      for (size_t k : c) ch.chain_of[job.nodes[k]] = static_cast<int>(ch.chains.size());
      ch.chains.push_back(std::move(c));
    }
  return ch;
}

// Per chain and iteration: flagged late, by how much, and (with DP) its signed lateness (its latest member
// against that member's peers; NaN when not measured).
struct Lateness {
  std::vector<std::vector<char>> flag;
  std::vector<std::vector<double>> late;
  std::vector<std::vector<double>> lat;
  double threshold = 0;  // the lateness (or step excess) that counts
  Lateness(size_t chains, size_t iters)
      : flag(chains, std::vector<char>(iters, 0)),
        late(chains, std::vector<double>(iters, 0)),
        lat(chains, std::vector<double>(iters, std::nan(""))) {}
};

// The step baseline of a pipeline without DP: the first third after warm-up (at least kPersist iterations).
double step_baseline(const std::vector<Iteration>& its) {
  size_t iters = its.size();
  std::vector<double> base_step;
  for (size_t i = kWarmup; i < kWarmup + std::max<size_t>(kPersist, (iters - kWarmup) / 3) && i < iters; ++i)
    base_step.push_back(static_cast<double>(its[i].duration_ns));
  return median(base_step);
}

// With DP: per iteration and DP group, a member that joins the synchronisation at least 10 % of a step after
// the median of the others makes them all wait that long.
void measure_late_joins(Lateness& L, const Structure& s, const Timeline& t, const std::vector<int>& chain_of,
                        size_t iters) {
  for (size_t i = kWarmup; i < iters; ++i)
    for (size_t g = 0; g < s.dp_groups.size(); ++g) {
      const auto& gs = t.syncs[i][g];
      if (gs.join.empty() || std::count(gs.join.begin(), gs.join.end(), 0u)) continue;
      // Lateness against the median of the other members; for large groups the median of all members
      // (the same to within one member) keeps this linear in the group size.
      std::vector<double> all(gs.join.begin(), gs.join.end());
      double med_all = median(all);
      for (size_t m = 0; m < gs.join.size(); ++m) {
        double ref_join = med_all;
        if (gs.join.size() <= 16) {
          std::vector<double> others;
          for (size_t o = 0; o < gs.join.size(); ++o)
            if (o != m) others.push_back(static_cast<double>(gs.join[o]));
          ref_join = median(others);
        }
        double l = static_cast<double>(gs.join[m]) - ref_join;
        int c = chain_of[s.dp_groups[g][m]];
        if (c < 0) continue;
        double& v = L.lat[static_cast<size_t>(c)][i];
        if (std::isnan(v) || l > v) v = l;
      }
    }
}

// Noise of a series from kWarmup on: kMadToSigma x MAD of its iteration-to-iteration changes / sqrt 2 (a
// lasting change moves it once, at its onset, so it barely widens this); NaN entries skipped.
double change_sigma(const std::vector<std::vector<double>>& series) {
  std::vector<double> diffs;
  for (const auto& v : series) {
    double prev = std::nan("");
    for (size_t i = kWarmup; i < v.size(); ++i) {
      if (std::isnan(v[i])) continue;
      if (!std::isnan(prev)) diffs.push_back(std::fabs(v[i] - prev));
      prev = v[i];
    }
  }
  return kMadToSigma * median(diffs) / std::sqrt(2.0);
}

// The lateness that counts: 10 % of a step, or kLateZ sigma of the job's own join noise when that is larger
// (change_sigma of every pipeline's lateness).
double late_threshold(const Lateness& L, double step) {
  return std::max(kStragglerExcess * step, kLateZ * change_sigma(L.lat));
}

// Per iteration and pipeline: late when its latest member joined `threshold` after its peers.
void flag_late_joins(Lateness& L, double threshold) {
  for (size_t c = 0; c < L.lat.size(); ++c)
    for (size_t i = kWarmup; i < L.lat[c].size(); ++i)
      if (L.lat[c][i] >= threshold) {  // NaN fails
        L.flag[c][i] = 1;
        L.late[c][i] = L.lat[c][i];
      }
}

// Without DP (one pipeline): late when its step exceeds its own baseline by 10 %.
void flag_slow_steps(Lateness& L, const std::vector<Iteration>& its, double baseline) {
  std::vector<std::vector<double>> steps(1);
  for (const Iteration& it : its) steps[0].push_back(static_cast<double>(it.duration_ns));
  L.threshold = std::max(kStragglerExcess * baseline, kLateZ * change_sigma(steps));
  for (size_t i = kWarmup; i < its.size(); ++i) {
    double l = static_cast<double>(its[i].duration_ns) - baseline;
    if (l >= L.threshold) {
      L.flag[0][i] = 1;
      L.late[0][i] = l;
    }
  }
}

// The sign test's chance is per group, not per pipeline: with C replicas, one of them is later than the
// others' median in every iteration of a window of W by chance about C x 2^-W of the time (each is later with
// probability 1/2 per iteration, and any of the C can be). kSignWindow (5) holds that at 1 in 16 for a pair;
// W = 5 + ceil(log2(C / 2)) keeps it there for larger groups. Measured: a healthy DDP4 run beside 3 CPU
// burners (alarms campaign, 2026-11-27) had one replica's first bucket 92, 22, 18, 48, 38 ms after the
// others' (its comm thread descheduled; its own truth log: compute ends within 10 ms of its peers) and was
// named with a median of 38.3 ms against a 38.2 ms threshold; its 6-window medians are 30 ms and below.
size_t sign_window(size_t replicas) {
  size_t w = kSignWindow;
  for (size_t c = 2; c < replicas; c *= 2) ++w;
  return w;
}

// The persistent signature (sign_window): a chain later than its peers in every iteration of a window, by a
// median of at least the threshold, is flagged from the window's first iteration above the threshold itself
// (the lead-in of small positive lateness before a fault begins is chance, not the fault).
void flag_persistently_late(Lateness& L, size_t iters, double threshold) {
  const size_t window = sign_window(L.lat.size());
  for (size_t c = 0; c < L.lat.size(); ++c)
    for (size_t i = kWarmup; i + window <= iters; ++i) {
      const auto& lat = L.lat[c];
      std::vector<double> w(lat.begin() + static_cast<long>(i), lat.begin() + static_cast<long>(i + window));
      if (!std::all_of(w.begin(), w.end(), [](double x) { return x > 0; })) continue;  // NaN fails too
      if (median(w) < threshold) continue;
      size_t from = i;
      while (lat[from] < threshold) ++from;
      for (size_t j = from; j < i + window; ++j) {
        L.flag[c][j] = 1;
        L.late[c][j] = std::max(L.late[c][j], lat[j]);
      }
    }
}

// Per stage of chain `c`: how much its own compute grew in the flagged iterations from `first`, against its
// same-stage peers (other replicas) or, without replicas, against its own iterations before the slowdown.
std::vector<double> compute_growth(const Chains& ch, size_t c, const std::vector<std::vector<double>>& unit,
                                   const std::vector<char>& flag, int first) {
  const auto& chains = ch.chains;
  const auto& chain = chains[c];
  std::vector<double> ratio(chain.size(), 0);
  for (size_t st = 0; st < chain.size(); ++st) {
    std::vector<double> r;
    for (size_t i = static_cast<size_t>(first); i < flag.size(); ++i) {
      if (!flag[i] || unit[i][chain[st]] <= 0) continue;
      double ref = 0;
      if (chains.size() > 1) {
        std::vector<double> peers;
        for (size_t o = 0; o < chains.size(); ++o)
          if (o != c && st < chains[o].size() && unit[i][chains[o][st]] > 0)
            peers.push_back(unit[i][chains[o][st]]);
        ref = median(peers);
      } else {
        std::vector<double> b;
        for (size_t j = kWarmup; j < static_cast<size_t>(first); ++j)
          if (unit[j][chain[st]] > 0) b.push_back(unit[j][chain[st]]);
        ref = median(b);
      }
      if (ref > 0) r.push_back(unit[i][chain[st]] / ref);
    }
    ratio[st] = median(r);
  }
  return ratio;
}

// The largest growth names the node; stages tied with it (growth within a fifth of the largest excess)
// resolve to the last of them. A slow downstream stage paces its upstream neighbour's sends and receives,
// so the upstream span grows as much as the slow one's (measured live on the testbed, DP2 x PP2 1F1B,
// stage-1 node at 1.3x: both x1.31, x1.30), while a slow upstream stage grows a downstream one's only in
// part (stage-0 node at 1.3x: x1.28-1.29 against x1.15-1.16). Ratio noise is about +-0.02.
size_t slowest_stage(const std::vector<double>& ratio) {
  size_t best = static_cast<size_t>(std::max_element(ratio.begin(), ratio.end()) - ratio.begin());
  for (size_t st = ratio.size(); st-- > best + 1;)
    if (ratio[best] - ratio[st] <= 0.2 * std::max(0.0, ratio[best] - 1.0)) return st;
  return best;
}

// A single pipeline is compared with its own earlier iterations, so a stretch of the whole job (host CPU
// contention, a slower phase of every rank) grows every stage's compute alike. When every measured stage grew
// by half the threshold or more and the named one by less than the threshold beyond the least-grown, no stage
// stands out: no straggler. Measured on the testbed: PP4 under 3 CPU burners grew x1.07-x1.16 on every stage
// (steps +19 %); a slow stage leaves at least one stage near x1.00 (the generator's 1.3x: x0.73-x1.00).
bool stretched_alike(const std::vector<double>& ratio, size_t named) {
  double least = ratio[named];
  for (double r : ratio)
    if (r > 0) least = std::min(least, r);
  return least >= 1 + kStragglerExcess / 2 && ratio[named] - least < kStragglerExcess;
}

// The finding for node `v` of chain `c`, late from iteration `first`.
Finding straggler_finding(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                          const std::vector<Iteration>& its, const Chains& ch, const Lateness& L, size_t c,
                          int first, uint32_t v, const std::vector<double>& ratio, double baseline) {
  double step = t.step_ns;
  const auto& chain = ch.chains[c];
  std::vector<double> ex, whatif;
  for (size_t i = static_cast<size_t>(first); i < its.size(); ++i)
    if (L.flag[c][i]) {
      ex.push_back(L.late[c][i]);
      whatif.push_back(static_cast<double>(its[i].duration_ns) - L.late[c][i]);
    }
  Finding f;
  f.kind = "straggler";
  f.subject = n.nodes[v];
  f.first_iteration = first;
  f.start_ns = its[static_cast<size_t>(first)].start_ns;
  double mex = median(ex);
  f.severity = mex / step;
  f.whatif_step_time_ms = median(whatif) / 1e6;
  std::string infl;
  for (size_t st = 0; st < chain.size(); ++st)
    infl += (st ? ", " : "") + n.nodes[job.nodes[chain[st]]] + " " + fmt("x%.2f", ratio[st]);
  f.evidence = (s.dp_groups.empty() ? "steps exceed the job's baseline (" + ms(baseline) + ") by a median "
                                    : "its pipeline joins the DP synchronisation a median ") +
               ms(mex) + (s.dp_groups.empty() ? "" : " after its DP peers") + " (" +
               fmt("%.0f", 100 * mex / step) + " % of the " + ms(step) + " step) in " +
               std::to_string(ex.size()) + " iterations from " + std::to_string(first) + " (threshold " +
               ms(L.threshold) + " = max(10 % of a step, 2 sigma of the iteration-to-iteration noise), " +
               "3 consecutive)";
  if (chain.size() > 1)
    f.evidence += "; shortest compute span per stage of that pipeline vs " +
                  std::string(ch.chains.size() > 1 ? "the same stage of the other replicas"
                                                   : "its own earlier iterations") +
                  ": " + infl + " (the largest names the node)";
  return f;
}

}  // namespace

void straggler_findings(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                        const std::vector<Iteration>& its, std::vector<Finding>& out) {
  size_t iters = its.size();
  double step = t.step_ns;
  std::vector<int> pos(n.nodes.size(), -1);
  for (size_t k = 0; k < job.nodes.size(); ++k) pos[job.nodes[k]] = static_cast<int>(k);
  auto unit = unit_compute(n, job, s, t);
  Chains ch = pipeline_chains(n, job, s, pos);
  // Late pipelines: with DP, by their members' joins; without, by the steps against their baseline.
  Lateness L(ch.chains.size(), iters);
  double baseline = step_baseline(its);
  if (!s.dp_groups.empty())
    measure_late_joins(L, s, t, ch.chain_of, iters);
  else if (ch.chains.size() == 1)
    flag_slow_steps(L, its, baseline);
  if (!s.dp_groups.empty()) {
    L.threshold = late_threshold(L, step);
    flag_late_joins(L, L.threshold);
  }
  flag_persistently_late(L, iters, L.threshold);
  if (debug::lines_on())
    for (size_t c = 0; c < ch.chains.size(); ++c) {
      std::string l = "straggler: pipeline of ";
      l += n.nodes[job.nodes[ch.chains[c][0]]];
      l += ", threshold ";
      l += ms(L.threshold);
      l += ", lateness (ms)";
      for (double x : L.lat[c]) {
        l += ' ';
        l += std::isnan(x) ? std::string("-") : fmt("%.1f", x / 1e6);
      }
      debug::line(l);
    }
  for (size_t c = 0; c < ch.chains.size(); ++c) {
    int first = first_run(L.flag[c], s.dp_groups.empty() ? kSignWindow : kPersist);
    if (first < 0) continue;
    std::vector<double> ratio = compute_growth(ch, c, unit, L.flag[c], first);
    size_t st = slowest_stage(ratio);
    uint32_t v = job.nodes[ch.chains[c][st]];
    if (ch.chains.size() == 1 && stretched_alike(ratio, st)) continue;
    out.push_back(straggler_finding(n, job, s, t, its, ch, L, c, first, v, ratio, baseline));
  }
}

}  // namespace netprism::analysis::diagnosis_steps
