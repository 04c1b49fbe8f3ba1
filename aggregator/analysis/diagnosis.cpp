// Stage 5: job state and findings (straggler, slow_link, slow_iteration, hang), each with evidence. The
// straggler finding (which node's compute is persistently slower than its peers') is in
// diagnosis_straggler.cpp.
#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "diagnosis_steps.hpp"

namespace netprism::analysis {

using diagnosis_steps::first_run;
using diagnosis_steps::fmt;
using diagnosis_steps::kPersist;
using diagnosis_steps::kWarmup;
using diagnosis_steps::ms;

namespace {

// slow_iteration: robust z-score with k = 5 on median/MAD (1.4826 MAD estimates sigma for Gaussian noise;
// k = 5 gives ~3e-7 false alarms per healthy iteration) and at least 50 % above the median: a steady job's
// sub-percent MAD would otherwise turn a 2 % wobble into a finding, and on shared hosts a healthy step
// stretches by a third from scheduling alone (measured on the testbed: +37 % once in a healthy PP4 run), so
// "far above its baseline" starts at 1.5x.
constexpr double kSlowIterK = 5.0;
constexpr double kSlowIterMinExcess = 0.5;
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

// Each run of iterations above the threshold (from kWarmup on) is one slow_iteration finding.
void slow_iteration_findings(const std::vector<Iteration>& its, const std::string& job_id,
                             std::vector<Finding>& out) {
  size_t iters = its.size();
  std::vector<double> d;
  for (size_t i = kWarmup; i < iters; ++i) d.push_back(static_cast<double>(its[i].duration_ns));
  double med = median(d), sig = robust_sigma(d, med);
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
    f.evidence = "iterations " + std::to_string(i) + "-" + std::to_string(j - 1) + ": longest " + ms(worst) +
                 " vs median " + ms(med) + " (MAD sigma " + ms(sig) + "; threshold " + ms(thr) +
                 " = median + max(5 sigma, 50 %))";
    out.push_back(std::move(f));
    i = j;
  }
}

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
      if ((list == &job.arrivals) == (arriving.count(direction_key(x)) > 0)) rated.push_back(&x);
  return rated;
}

bool rated(const Xfer& x) {
  return x.bytes >= kRateMinBytes && x.t1 > x.t0;
}
double rate(const Xfer& x) {
  return static_cast<double>(x.bytes) / static_cast<double>(x.t1 - x.t0);
}

// Per direction (in node order): its role and median rate; per role: the links' median rates.
using Direction = std::pair<uint32_t, uint32_t>;
struct Link {
  EdgeRole role = EdgeRole::dp;
  double median_rate = 0;
};
struct LinkRates {
  std::map<Direction, Link> links;
  std::map<EdgeRole, std::vector<double>> by_role;
  std::map<EdgeRole, double> role_median;  // once per role, not once per link (quadratic on large jobs)
};
// Rates gathered through a hash index (a tree lookup per transfer costs a log factor on large jobs), then
// moved into an ordered map so findings come out in a fixed order.
LinkRates link_rates(const std::vector<const Xfer*>& transfers, const Structure& s) {
  struct Gathered {
    std::vector<double> rates;
    EdgeRole role = EdgeRole::dp;
  };
  std::unordered_map<uint64_t, Gathered> by_key;
  for (const Xfer* x : transfers) {
    if (!rated(*x)) continue;
    Gathered& l = by_key[direction_key(*x)];
    l.role = s.stage_of[x->src] == s.stage_of[x->dst] ? EdgeRole::dp : EdgeRole::pp;
    l.rates.push_back(rate(*x));
  }
  std::map<Direction, Gathered> ordered;
  for (auto& [k, l] : by_key)
    ordered.emplace(std::make_pair(static_cast<uint32_t>(k >> 32), static_cast<uint32_t>(k)), std::move(l));
  LinkRates lr;
  for (auto& [k, l] : ordered) {
    Link& link = lr.links[k];
    link.role = l.role;
    link.median_rate = median(l.rates);
    lr.by_role[l.role].push_back(link.median_rate);
  }
  for (auto& [role, rates] : lr.by_role) lr.role_median[role] = median(rates);
  return lr;
}

// When a slow direction began: the first run of kPersist transfers in the degraded regime (its first
// transfer when there is none). The regime boundary is the geometric middle between the link's own median
// rate and the comparable links' (capped at the detection threshold): healthy transfers of a few hundred
// KiB scatter well below the median rate (latency, window growth; measured on the testbed: down to a fifth
// of it), so half the reference would date a fault several iterations before it began.
uint64_t slow_link_onset(const std::vector<const Xfer*>& own, double med_rate, double ref) {
  double onset = std::min(kSlowLinkRatio * ref, std::sqrt(med_rate * ref));
  std::vector<char> flags;
  std::vector<uint64_t> times;
  for (const Xfer* x : own)
    if (rated(*x)) {
      flags.push_back(rate(*x) < onset);
      times.push_back(x->t0);
    }
  int fr = first_run(flags);
  return fr >= 0 ? times[static_cast<size_t>(fr)] : times.front();
}

// What-if: the extra transfer time at the comparable rate, removed from the step.
double slow_link_whatif_step(const std::vector<const Xfer*>& own, double ref, double step, size_t iters) {
  double extra = 0;
  for (const Xfer* x : own)
    if (x->t1 > x->t0) {
      double at_ref = static_cast<double>(x->bytes) / ref;
      extra += std::max(0.0, static_cast<double>(x->t1 - x->t0) - at_ref);
    }
  double per_iter = extra / static_cast<double>(std::max<size_t>(iters, 1));
  return std::max(0.0, step - per_iter);
}

// A direction whose median rate is below kSlowLinkRatio of its role's median, among at least three links
// of that role ("much slower than comparable pairs" needs at least two others), is a slow_link.
void slow_link_findings(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                        size_t iters, std::vector<Finding>& out) {
  double step = t.step_ns;
  std::vector<const Xfer*> rated_xfers = rated_transfers(job);
  LinkRates lr = link_rates(rated_xfers, s);
  for (auto& [k, l] : lr.links) {
    auto& peers = lr.by_role[l.role];
    if (peers.size() < 3) continue;
    double ref = lr.role_median[l.role];
    if (l.median_rate >= kSlowLinkRatio * ref) continue;
    std::vector<const Xfer*> own;  // this direction's transfers, in time order (all from one view)
    for (const Xfer* x : rated_xfers)
      if (x->src == k.first && x->dst == k.second) own.push_back(x);
    uint64_t start = slow_link_onset(own, l.median_rate, ref);
    Finding f;
    f.kind = "slow_link";
    f.subject = n.nodes[k.first] + "->" + n.nodes[k.second];
    auto it = std::upper_bound(t.boundaries.begin(), t.boundaries.end(), start);
    f.first_iteration = it == t.boundaries.begin() ? 0 : static_cast<int>(it - t.boundaries.begin()) - 1;
    f.first_iteration = std::min(f.first_iteration, std::max(0, static_cast<int>(iters) - 1));
    f.start_ns = start;
    f.severity = ref / l.median_rate;
    f.evidence = "median rate " + fmt("%.1f MB/s", l.median_rate * 1e3) + " vs " +
                 fmt("%.1f MB/s", ref * 1e3) + " median of " + std::to_string(peers.size()) + " " +
                 (l.role == EdgeRole::dp ? "DP" : "pipeline") + " links of the job (threshold " +
                 fmt("%.2fx", kSlowLinkRatio) + ")";
    if (iters > 0 && step > 0) f.whatif_step_time_ms = slow_link_whatif_step(own, ref, step, iters) / 1e6;
    out.push_back(std::move(f));
  }
}

// One finding per node pair: both directions of a shaped link are slow together.
void merge_link_directions(std::vector<Finding>& out) {
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
}

// Links found slow explain the waiting of the nodes they feed: no straggler is named next to one.
std::vector<char> nodes_near_slow_links(const Normalized& n, const Structure& s,
                                        const std::vector<Finding>& out) {
  std::vector<char> near(n.nodes.size(), 0);
  for (const auto& f : out)
    if (f.kind == "slow_link")
      for (const auto& e : s.edges)
        for (uint32_t a : {e.u, e.v})
          if (f.subject.find(n.nodes[a]) != std::string::npos) near[e.u] = near[e.v] = 1;
  return near;
}

// The hang: the job, or the node that went silent first when it stopped clearly before the others (a tenth
// of a step: the others keep sending what they can until they block on it).
Finding hang_finding(const Normalized& n, const JobSlice& job, double step, size_t iters, uint64_t now_ns,
                     const std::string& job_id) {
  std::map<uint32_t, uint64_t> last_send;
  for (const Xfer& x : job.xfers) last_send[x.src] = std::max(last_send[x.src], x.t1);
  std::vector<std::pair<uint64_t, uint32_t>> order;
  for (auto& [v, tt] : last_send) order.emplace_back(tt, v);
  std::sort(order.begin(), order.end());
  Finding f;
  f.kind = "hang";
  f.subject = job_id;
  f.start_ns = job.last_ns;
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
  return f;
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
  if (iters > kWarmup + 2) slow_iteration_findings(its, job_id, out);
  slow_link_findings(n, job, s, t, iters, out);
  merge_link_directions(out);
  if (iters > kWarmup + kPersist && step > 0)
    diagnosis_steps::straggler_findings(n, job, s, t, its, nodes_near_slow_links(n, s, out), out);
  if (state == "hung") out.push_back(hang_finding(n, job, step, iters, now_ns, job_id));
  return out;
}

}  // namespace netprism::analysis
