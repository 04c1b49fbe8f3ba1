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
#include <cstdlib>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "stages.hpp"

namespace netprism::analysis {
namespace {

// slow_iteration: robust z-score with k = 5 on median/MAD (1.4826 MAD estimates sigma for Gaussian noise;
// k = 5 gives ~3e-7 false alarms per healthy iteration) and at least 50 % above the median: a steady job's
// sub-percent MAD would otherwise turn a 2 % wobble into a finding, and on shared hosts a healthy step
// stretches by a third from scheduling alone (measured on the testbed: +37 % once in a healthy PP4 run), so
// "far above its baseline" starts at 1.5x.
constexpr double kSlowIterK = 5.0;
constexpr double kSlowIterMinExcess = 0.5;
// The first two iterations seen carry warm-up (allocator growth, lazy initialisation, connection set-up);
// they are excluded from baselines and findings.
constexpr size_t kWarmup = 2;
// Straggler: extra compute of at least 10 % of a step over its peers, in at least 3 consecutive
// iterations. Scheduling noise on a shared host moves a node's compute by a few percent of a step and not
// persistently; a +30 % compute fault is three times the threshold; three iterations keep one-off pauses out
// and still name the node within the required three iterations.
constexpr double kStragglerExcess = 0.10;
constexpr size_t kPersist = 3;
// On a loaded host the scheduling noise in a member's join reaches the threshold itself (measured: a 1.3x
// straggler on a host at load ~14 joined 34-172 ms after its peer, step 600 ms, so rarely three times in a
// row above 60 ms, while healthy members also strayed up to 130 ms once). The same member being the later
// one every time is the persistent signature instead: a window of kSignWindow iterations in which it joins
// after its peers in every one (by chance 1 in 2^5 = 32 for a pair of equals, and the median lateness must
// still reach the 10 % threshold, which a chance run of small leads does not).
constexpr size_t kSignWindow = 5;
// slow_link: median transfer rate below a third of the median of comparable links (same role in the same
// job), over transfers of at least 64 KiB (smaller ones are dominated by latency, not rate). Measured on the
// testbed's live runs (30 kept runs, 2 loaded cores): a healthy DP link's median rate reaches 0.48-0.50 of
// its role's median when its receiver's ranks are short of CPU (flow control stretches the arrivals), and a
// CI run reported that as a slow link under the earlier threshold of one half; the shaped links of the
// slow-link runs read 0.015-0.025. A third keeps 1.5x margin below the healthy spread and still reports any
// link running at a third of its peers' rate or worse.
constexpr double kSlowLinkRatio = 1.0 / 3.0;
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

}  // namespace

namespace {}  // namespace

void straggler_findings(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                        const std::vector<Iteration>& its, const std::vector<char>& near_slow_link,
                        std::vector<Finding>& out) {
  size_t iters = its.size();
  double step = t.step_ns;
  std::vector<int> pos(n.nodes.size(), -1);
  for (size_t k = 0; k < job.nodes.size(); ++k) pos[job.nodes[k]] = static_cast<int>(k);
  auto unit = unit_compute(n, job, s, t);
  // Pipelines (replicas): chains over pipeline edges from each first-stage node.
  std::vector<std::vector<uint32_t>> down(n.nodes.size());
  for (const auto& e : s.edges)
    if (e.role == EdgeRole::pp) down[e.u].push_back(e.v);
  std::vector<int> chain_of(n.nodes.size(), -1);
  std::vector<std::vector<size_t>> chains;  // positions in job.nodes, first stage first
  for (uint32_t v : job.nodes)
    if (s.stage_of[v] == 0) {
      std::vector<size_t> c{static_cast<size_t>(pos[v])};
      for (uint32_t cur = v; down[cur].size() == 1; cur = down[cur][0])
        c.push_back(static_cast<size_t>(pos[down[cur][0]]));
      for (size_t k : c) chain_of[job.nodes[k]] = static_cast<int>(chains.size());
      chains.push_back(std::move(c));
    }

  // Late pipelines: per iteration and DP group, a member that joins the synchronisation at least 10 % of a
  // step after the median of the others makes them all wait that long. Without DP, a pipeline is late when
  // its step exceeds its own baseline (the first third after warm-up) by 10 %.
  std::vector<std::vector<char>> flag(chains.size(), std::vector<char>(iters, 0));
  std::vector<std::vector<double>> late(chains.size(), std::vector<double>(iters, 0));
  // Signed lateness of each chain per iteration (its latest member against that member's peers); NaN when
  // not measured.
  std::vector<std::vector<double>> lat(chains.size(), std::vector<double>(iters, std::nan("")));
  std::vector<double> base_step;
  for (size_t i = kWarmup; i < kWarmup + std::max<size_t>(kPersist, (iters - kWarmup) / 3) && i < iters; ++i)
    base_step.push_back(static_cast<double>(its[i].duration_ns));
  double baseline = median(base_step);
  for (size_t i = kWarmup; i < iters; ++i) {
    if (!s.dp_groups.empty()) {
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
          if (c >= 0) {
            double& v = lat[static_cast<size_t>(c)][i];
            if (std::isnan(v) || l > v) v = l;
          }
          if (c < 0 || l < kStragglerExcess * step) continue;
          flag[static_cast<size_t>(c)][i] = 1;
          late[static_cast<size_t>(c)][i] = std::max(late[static_cast<size_t>(c)][i], l);
        }
      }
    } else if (chains.size() == 1) {
      double l = static_cast<double>(its[i].duration_ns) - baseline;
      if (l >= kStragglerExcess * baseline) {
        flag[0][i] = 1;
        late[0][i] = l;
      }
    }
  }
  for (size_t c = 0; c < chains.size(); ++c)
    for (size_t i = kWarmup; i + kSignWindow <= iters; ++i) {
      std::vector<double> w(lat[c].begin() + static_cast<long>(i),
                            lat[c].begin() + static_cast<long>(i + kSignWindow));
      if (!std::all_of(w.begin(), w.end(), [](double x) { return x > 0; })) continue;  // NaN fails too
      if (median(w) < kStragglerExcess * step) continue;
      // Flagged from the window's first iteration above the threshold itself: the lead-in of small
      // positive lateness before a fault begins is chance, not the fault.
      size_t from = i;
      while (lat[c][from] < kStragglerExcess * step) ++from;
      for (size_t j = from; j < i + kSignWindow; ++j) {
        flag[c][j] = 1;
        late[c][j] = std::max(late[c][j], lat[c][j]);
      }
    }
  for (size_t c = 0; c < chains.size(); ++c) {
    int first = first_run(flag[c]);
    if (first < 0) continue;
    const auto& chain = chains[c];
    // Which node of the late pipeline: the one whose own compute grew most, against its same-stage peers
    // (other replicas) or, without replicas, against its own iterations before the slowdown.
    std::vector<double> ratio(chain.size(), 0);
    for (size_t st = 0; st < chain.size(); ++st) {
      std::vector<double> r;
      for (size_t i = static_cast<size_t>(first); i < iters; ++i) {
        if (!flag[c][i] || unit[i][chain[st]] <= 0) continue;
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
    // The largest growth names the node; stages tied with it (growth within a fifth of the largest excess)
    // resolve to the last of them. A slow downstream stage paces its upstream neighbour's sends and receives,
    // so the upstream span grows as much as the slow one's (measured live on the testbed, DP2 x PP2 1F1B,
    // stage-1 node at 1.3x: both x1.31, x1.30), while a slow upstream stage grows a downstream one's only in
    // part (stage-0 node at 1.3x: x1.28-1.29 against x1.15-1.16). Ratio noise is about +-0.02.
    size_t best = static_cast<size_t>(std::max_element(ratio.begin(), ratio.end()) - ratio.begin());
    for (size_t st = chain.size(); st-- > best + 1;)
      if (ratio[best] - ratio[st] <= 0.2 * std::max(0.0, ratio[best] - 1.0)) {
        best = st;
        break;
      }
    size_t who = chain[best];
    uint32_t v = job.nodes[who];
    if (near_slow_link[v]) continue;
    std::vector<double> ex, whatif;
    for (size_t i = static_cast<size_t>(first); i < iters; ++i)
      if (flag[c][i]) {
        ex.push_back(late[c][i]);
        whatif.push_back(static_cast<double>(its[i].duration_ns) - late[c][i]);
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
                 std::to_string(ex.size()) + " iterations from " + std::to_string(first) +
                 " (threshold 10 % of a step, 3 consecutive)";
    if (chain.size() > 1)
      f.evidence += "; shortest compute span per stage of that pipeline vs " +
                    std::string(chains.size() > 1 ? "the same stage of the other replicas"
                                                  : "its own earlier iterations") +
                    ": " + infl + " (the largest names the node)";
    out.push_back(std::move(f));
  }
}

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
  // A recording whose last event is the job's last transfer (a simulator's or collector's export that stops
  // with the traffic it holds) shows no silence after the job at all: nothing to call a hang, and as far as
  // the recording goes the job's traffic is complete.
  if (n.offline && now_ns <= job.last_ns) return "ended";
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
                   " = median + max(5 sigma, 50 %))";
      out.push_back(std::move(f));
      i = j;
    }
  }

  // --- slow_link
  {
    struct Link {
      std::vector<double> rates;
      EdgeRole role = EdgeRole::dp;
      uint64_t first_slow_t = 0;
    };
    // Rates gathered through a hash index (a tree lookup per transfer costs a log factor on large jobs),
    // then moved into an ordered map so findings come out in a fixed order.
    //
    // A direction's rate is read from the receiver's view where its agent saw the data arrive: on a shaped or
    // congested link the sender's data leaves as fast as its congestion window allows and queues on the way,
    // so its departures come in quick bursts while the arrivals trickle in at the link's rate. Without
    // arrivals (CSV imports, a receiver without an agent) the sender's view is all there is.
    auto key_of = [](const Xfer& x) { return uint64_t{x.src} << 32 | x.dst; };
    std::unordered_set<uint64_t> arriving;
    for (const Xfer& x : job.arrivals) arriving.insert(key_of(x));
    std::vector<const Xfer*> rated;  // each direction's transfers in the view its rate is read from
    for (const auto* list : {&job.arrivals, &job.xfers})
      for (const Xfer& x : *list)
        if ((list == &job.arrivals) == (arriving.count(key_of(x)) > 0)) rated.push_back(&x);
    std::unordered_map<uint64_t, Link> by_key;
    for (const Xfer* x : rated) {
      if (x->bytes < kRateMinBytes || x->t1 <= x->t0) continue;
      Link& l = by_key[key_of(*x)];
      l.role = s.stage_of[x->src] == s.stage_of[x->dst] ? EdgeRole::dp : EdgeRole::pp;
      l.rates.push_back(static_cast<double>(x->bytes) / static_cast<double>(x->t1 - x->t0));
    }
    std::map<std::pair<uint32_t, uint32_t>, Link> links;
    for (auto& [k, l] : by_key)
      links.emplace(std::make_pair(static_cast<uint32_t>(k >> 32), static_cast<uint32_t>(k)), std::move(l));
    std::map<EdgeRole, std::vector<double>> by_role;
    std::map<std::pair<uint32_t, uint32_t>, double> med_rate;
    for (auto& [k, l] : links) {
      med_rate[k] = median(l.rates);
      by_role[l.role].push_back(med_rate[k]);
    }
    std::map<EdgeRole, double> role_median;  // once per role, not once per link (quadratic on large jobs)
    for (auto& [role, rates] : by_role) role_median[role] = median(rates);
    for (auto& [k, l] : links) {
      auto& peers = by_role[l.role];
      if (peers.size() < 3) continue;  // "much slower than comparable pairs" needs at least two others
      double ref = role_median[l.role];
      if (med_rate[k] >= kSlowLinkRatio * ref) continue;
      // When it began: the first run of three transfers in the degraded regime. The regime boundary is the
      // geometric middle between the link's own median rate and the comparable links' (capped at the
      // detection threshold): healthy transfers of a few hundred KiB scatter well below the median rate
      // (latency, window growth; measured on the testbed: down to a fifth of it), so half the reference
      // would date a fault several iterations before it began.
      double onset = std::min(kSlowLinkRatio * ref, std::sqrt(med_rate[k] * ref));
      std::vector<char> flags;
      std::vector<uint64_t> times;
      // This direction's transfers, in time order: all from one view (see rated), and each view's list is.
      std::vector<const Xfer*> own;
      for (const Xfer* x : rated)
        if (x->src == k.first && x->dst == k.second) own.push_back(x);
      for (const Xfer* x : own)
        if (x->bytes >= kRateMinBytes && x->t1 > x->t0) {
          flags.push_back(static_cast<double>(x->bytes) / static_cast<double>(x->t1 - x->t0) < onset);
          times.push_back(x->t0);
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
                   (l.role == EdgeRole::dp ? "DP" : "pipeline") + " links of the job (threshold " +
                   fmt("%.2fx", kSlowLinkRatio) + ")";
      // What-if: the extra transfer time at the comparable rate, removed from the step.
      double extra = 0;
      size_t cnt = 0;
      for (const Xfer* x : own)
        if (x->t1 > x->t0) {
          double at_ref = static_cast<double>(x->bytes) / ref;
          extra += std::max(0.0, static_cast<double>(x->t1 - x->t0) - at_ref);
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

  // One finding per node pair: both directions of a shaped link are slow together.
  for (size_t a = 0; a < out.size(); ++a) {
    if (out[a].kind != "slow_link") continue;
    auto arrow = out[a].subject.find("->");
    if (arrow == std::string::npos || out[a].subject.find("<->") != std::string::npos) continue;
    std::string rev = out[a].subject.substr(arrow + 2) + "->" + out[a].subject.substr(0, arrow);
    for (size_t b = a + 1; b < out.size(); ++b)
      if (out[b].kind == "slow_link" && out[b].subject == rev) {
        out[a].subject = out[a].subject.substr(0, arrow) + "<->" + out[a].subject.substr(arrow + 2);
        out[a].severity = std::max(out[a].severity, out[b].severity);
        out[a].first_iteration = std::min(out[a].first_iteration, out[b].first_iteration);
        out[a].start_ns = std::min(out[a].start_ns, out[b].start_ns);
        out[a].evidence = "both directions: " + out[a].evidence + "; reverse: " + out[b].evidence;
        out.erase(out.begin() + static_cast<long>(b));
        break;
      }
  }

  // --- straggler
  // Links found slow explain the waiting of the nodes they feed: no straggler is named next to one.
  std::vector<char> near_slow_link(n.nodes.size(), 0);
  for (const auto& f : out)
    if (f.kind == "slow_link")
      for (const auto& e : s.edges)
        for (uint32_t a : {e.u, e.v})
          if (f.subject.find(n.nodes[a]) != std::string::npos) near_slow_link[e.u] = near_slow_link[e.v] = 1;
  if (iters > kWarmup + kPersist && step > 0) straggler_findings(n, job, s, t, its, near_slow_link, out);

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
