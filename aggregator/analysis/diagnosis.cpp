// Stage 5: job state and findings (straggler, slow_link, slow_iteration, hang), each with evidence. The
// straggler finding (which node's compute is persistently slower than its peers') is in
// diagnosis_straggler.cpp.
#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "debug_log.hpp"
#include "diagnosis_steps.hpp"

namespace netprism::analysis {

using diagnosis_steps::fmt;
using diagnosis_steps::kPersist;
using diagnosis_steps::kWarmup;
using diagnosis_steps::ms;

namespace {

// Hang: silence of max(2 steps, 1.5 s). The last traffic trails the hang's start by up to one step (peers
// finish what they can), so reporting 2 steps after the last traffic stays within the required
// max(3 steps, 2 s) + 2 s of the hang's start, with a second left for the daemon's refresh period; a
// running job is never silent for two whole steps.
constexpr double kHangSteps = 2.0;
constexpr uint64_t kHangMinNs = 1'500'000'000;
// A job whose connections were closed (FIN/RST) on at least half of them has ended: a normal exit closes
// all, a crash of one rank resets at least its own and its peers then exit.
constexpr double kEndedShare = 0.5;

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

// The two nodes of a slow_link finding's subject ("a->b" or "a<->b").
std::pair<std::string, std::string> link_ends(const std::string& subject) {
  auto arrow = subject.find("->");
  if (arrow == std::string::npos) return {subject, subject};
  size_t a_end = arrow > 0 && subject[arrow - 1] == '<' ? arrow - 1 : arrow;
  return {subject.substr(0, a_end), subject.substr(arrow + 2)};
}

bool touches(const Finding& link, const std::string& node) {
  auto [a, b] = link_ends(link.subject);
  return a == node || b == node;
}

// Whether a slow_link finding touches node v or one of its peers (the nodes whose waiting it explains).
bool near_node(const Normalized& n, const Structure& s, const Finding& link, uint32_t v) {
  if (touches(link, n.nodes[v])) return true;
  for (const auto& e : s.edges)
    if ((e.u == v && touches(link, n.nodes[e.v])) || (e.v == v && touches(link, n.nodes[e.u]))) return true;
  return false;
}

// Stragglers and slow links near them: one cause is named. A link that was slow when (or before) a node's
// lateness began explains it, and no straggler is named next to it. A straggler whose lateness began
// before every slow link near it is not their doing; those links are its effect and are dropped: a late
// rank's receives drain late, and the peers waiting on it in a collective drain theirs late too, so
// transfers into them stretch. A slow link itself delays a node's joins only from its onset on (the
// receiver finishes its synchronisation late, then starts its next compute late). Measured: fresh
// mpi_straggler runs (DP4, n1 x1.4 from iteration 6), n1 late by 90 ms from iteration 5; in 1 of 5 offline
// runs n0->n1 ran at 0.39-0.59x from iteration 9, in 1 of 3 live runs n2->n0 at 0.30-0.47x from iteration
// 7. In the slow-link recordings no node's lateness crosses the straggler threshold at all.
void settle_stragglers_and_links(const Normalized& n, const Structure& s, std::vector<Finding>& out,
                                 std::vector<Finding> stragglers) {
  // The slow_link findings of `out` near a straggler's node (none when its subject names no node).
  auto links_near = [&](const Finding& st) {
    std::vector<size_t> near;
    auto v = static_cast<uint32_t>(std::find(n.nodes.begin(), n.nodes.end(), st.subject) - n.nodes.begin());
    if (v >= n.nodes.size()) return near;
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i].kind == "slow_link" && near_node(n, s, out[i], v)) near.push_back(i);
    return near;
  };
  std::vector<char> effect(out.size(), 0);
  for (const Finding& st : stragglers) {
    std::vector<size_t> near = links_near(st);
    if (std::all_of(near.begin(), near.end(),
                    [&](size_t i) { return st.first_iteration < out[i].first_iteration; }))
      for (size_t i : near) effect[i] = 1;
  }
  std::vector<Finding> kept;
  for (size_t i = 0; i < out.size(); ++i)
    if (!effect[i]) kept.push_back(std::move(out[i]));
  out = std::move(kept);
  for (Finding& st : stragglers)
    if (links_near(st).empty()) out.push_back(std::move(st));
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

// The job's nodes and training connections as masks over the slice's nodes and connections, built once for
// the two teardown tests below (each looks at the other connections between the job's nodes).
struct JobConns {
  std::vector<char> in_job, training;
  JobConns(const Normalized& n, const JobSlice& job)
      : in_job(n.nodes.size(), 0), training(n.conns.size(), 0) {
    for (uint32_t v : job.nodes) in_job[v] = 1;
    for (uint32_t c : job.conns) training[c] = 1;
  }
  // A connection between two of the job's nodes that carried no training transfer.
  bool other(const Conn& k, size_t c) const { return !training[c] && in_job[k.a] && in_job[k.b]; }
};

// What the source shows of a job's teardown. A full view (agents, IPFIX, CSV with flags) sees every
// connection's FIN or RST; 1:N packet samples (sFlow) see a connection's teardown only when one of its two
// FINs was sampled, p = 1 - (1 - 1/N)^2: 0.36 at 1:5, 0.002 at 1:1000. A job has ended when at least
// kEndedShare of the teardowns the source could show are there; it has not when an end would have shown
// more with probability 1 - kTeardownAlpha (a full view: fewer than kEndedShare closed); between the two the
// source cannot tell an end from a hang (the testbed's DP 2 x PP 2 gloo job at 1:5: 3-11 connections seen,
// P(so few | end) 5-26 %; at switches' usual 1:1000 and above, always).
enum class Teardown { ended, not_ended, unknown };
constexpr double kTeardownAlpha = 0.01;

Teardown teardown_seen(const Normalized& n, const JobSlice& job, const JobConns& jc) {
  size_t closed = 0;
  double expect = 0;
  std::vector<double> p;
  auto count = [&](const Conn& k) {
    closed += k.closed ? 1 : 0;
    double miss = k.sampled_1_in > 1 ? 1.0 - 1.0 / k.sampled_1_in : 0.0;
    p.push_back(1.0 - miss * miss);
    expect += p.back();
  };
  for (uint32_t c : job.conns) count(n.conns[c]);
  // Sampled, the job's other connections count too (a process group's idle all-pairs connections, the
  // rendezvous store: 4 training connections of a DP 2 x PP 2 gloo job leave a 17 % chance of no teardown
  // seen at 1:5): every connection between its nodes still open when the training traffic stopped closes
  // when the job ends. Only sampled ones, so a full view's rule stays the training connections'.
  for (size_t c = 0; c < n.conns.size(); ++c) {
    const Conn& k = n.conns[c];
    if (jc.other(k, c) && k.sampled_1_in > 1 && k.first_ns <= job.last_ns &&
        !(k.closed && k.last_ns < job.last_ns))
      count(k);
  }
  if (job.conns.empty()) return Teardown::not_ended;
  if (static_cast<double>(closed) >= kEndedShare * expect) return Teardown::ended;
  // P(at most `closed` teardowns seen | every connection closed): the Poisson-binomial CDF, by dynamic
  // programming over the connections (closed < expect / 2 states).
  std::vector<double> at(closed + 1, 0.0);
  at[0] = 1;
  for (double q : p)
    for (size_t k = closed + 1; k-- > 0;) at[k] = at[k] * (1 - q) + (k > 0 ? at[k - 1] * q : 0.0);
  double cdf = 0;
  for (double v : at) cdf += v;
  if (debug::lines_on()) {
    std::string l;
    debug::appendf(l, "teardown: %zu of %zu connections closed, %.2f expected at an end, P(so few) %.4f",
                   closed, p.size(), expect, cdf);
    debug::line(l);
  }
  return cdf < kTeardownAlpha ? Teardown::not_ended : Teardown::unknown;
}

// Sources without TCP flags (flow CSV): a normal exit still shows as the teardown of every connection of the
// job at once: the ones idle since start-up (all-pairs process-group connections, the rendezvous store)
// carry their last packets after the last training transfer. A hang leaves them silent.
bool idle_connections_woke(const Normalized& n, const JobSlice& job, const JobConns& jc) {
  size_t idle = 0, woke = 0;
  for (size_t c = 0; c < n.conns.size(); ++c) {
    const Conn& k = n.conns[c];
    if (!jc.other(k, c) || k.first_ns > job.first_ns) continue;
    ++idle;
    woke += k.last_ns > job.last_ns ? 1 : 0;
  }
  return idle > 0 && static_cast<double>(woke) >= kEndedShare * static_cast<double>(idle);
}

}  // namespace

std::string job_state(const Normalized& n, const JobSlice& job, double step_ns, size_t iterations) {
  uint64_t now_ns = n.now_ns;
  const JobConns jc(n, job);
  Teardown td = teardown_seen(n, job, jc);
  if (td == Teardown::ended || idle_connections_woke(n, job, jc)) return "ended";
  // A recording whose last event is the job's last transfer (a simulator's or collector's export that stops
  // with the traffic it holds) shows no silence after the job at all: nothing to call a hang, and as far as
  // the recording goes the job's traffic is complete.
  if (n.offline && now_ns <= job.last_ns) return "ended";
  // A silent job whose source cannot show its teardown (sampled) may have ended or hung: idle, not a hang.
  const char* stopped = td == Teardown::unknown ? "idle" : "hung";
  // A recording: periodic traffic that stopped without a teardown stopped for good (see Input::offline).
  if (n.offline) return iterations >= 2 ? stopped : "idle";
  uint64_t quiet = now_ns > job.last_ns ? now_ns - job.last_ns : 0;
  double hang_after = std::max(kHangSteps * step_ns, static_cast<double>(kHangMinNs));
  if (step_ns > 0 && static_cast<double>(quiet) > hang_after) return stopped;
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
  if (iters > kWarmup + 2) diagnosis_steps::slow_iteration_findings(n, job, s, t, its, job_id, out);
  diagnosis_steps::slow_link_findings(n, job, s, t, iters, out);
  merge_link_directions(out);
  if (iters > kWarmup + kPersist && step > 0) {
    std::vector<Finding> stragglers;
    diagnosis_steps::straggler_findings(n, job, s, t, its, stragglers);
    settle_stragglers_and_links(n, s, out, std::move(stragglers));
  }
  if (state == "hung") out.push_back(hang_finding(n, job, step, iters, now_ns, job_id));
  return out;
}

}  // namespace netprism::analysis
