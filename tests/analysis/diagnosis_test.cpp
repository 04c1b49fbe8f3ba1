// Stage 5: findings and job state on synthetic faults; healthy and benign runs give no finding.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "netprism/flowlet.h"
#include "diagnosis_steps.hpp"
#include "synth.hpp"

using namespace netprism::analysis;

namespace {
Job run(const synth::Spec& s, uint64_t now_ns = 0) {
  Input in;
  synth::generate(s, in);
  in.now_ns = now_ns;
  auto r = analyze(in);
  EXPECT_EQ(r.jobs.size(), 1u);
  return r.jobs.empty() ? Job{} : r.jobs[0];
}
std::vector<Finding> of_kind(const Job& j, const std::string& k) {
  std::vector<Finding> out;
  for (const auto& f : j.findings)
    if (f.kind == k) out.push_back(f);
  return out;
}
}  // namespace

TEST(AnalysisDiagnosis, HealthyShapesHaveNoFindingsAndEnd) {
  for (auto [dp, pp, gpipe] : {std::tuple{4, 1, false}, {1, 4, false}, {2, 2, true}, {2, 3, false}}) {
    synth::Spec s;
    s.dp = dp;
    s.pp = pp;
    s.gpipe = gpipe;
    s.iters = 16;
    Job j = run(s);
    EXPECT_TRUE(j.findings.empty()) << dp << "x" << pp << ": " << j.findings.front().kind << " "
                                    << j.findings.front().evidence;
    EXPECT_EQ(j.state, "ended");
  }
}

TEST(AnalysisDiagnosis, ComputeStragglerNamedWithWhatIf) {
  for (auto [dp, pp, node] : {std::tuple{2, 2, 1}, {2, 2, 2}, {4, 1, 3}, {1, 4, 2}}) {
    synth::Spec healthy;
    healthy.dp = dp;
    healthy.pp = pp;
    healthy.iters = 16;
    double step = run(healthy).step_time_ms;
    synth::Spec s = healthy;
    s.straggler_node = node;
    s.straggler_factor = 1.3;
    s.straggler_from = 6;
    Job j = run(s);
    auto f = of_kind(j, "straggler");
    ASSERT_EQ(f.size(), 1u) << dp << "x" << pp;
    // The generator's schedule is too idealised to place the slow node inside its pipeline (every message
    // lands exactly when a busy node is mid-compute); the node's pipeline (replica) must be right, and the
    // exact node is checked on the testbed's real recordings (analysis_sample_straggler*, where stragglers
    // in stage 0 and stage 1 are named exactly).
    if (pp == 1) {
      EXPECT_EQ(f[0].subject, synth::node_name(s, node)) << f[0].evidence;
    } else {
      int named = std::stoi(f[0].subject.substr(1));
      EXPECT_EQ(dp > 1 ? named % dp : 0, dp > 1 ? node % dp : 0) << f[0].evidence;
    }
    EXPECT_GE(f[0].first_iteration + 2, 6 - 2);  // index 0 is the generator's iteration 1
    EXPECT_LE(f[0].first_iteration, 6 - 1 + 3);
    ASSERT_TRUE(f[0].whatif_step_time_ms);
    EXPECT_NEAR(*f[0].whatif_step_time_ms, step, 0.10 * step) << f[0].evidence;
    EXPECT_TRUE(of_kind(j, "slow_link").empty());
  }
}

TEST(AnalysisDiagnosis, BenignPauseOfEveryRankIsNoStragglerNorSlowLink) {
  synth::Spec s;
  s.iters = 14;
  s.pause_at = 6;
  s.pause_ms = 1500;
  Job j = run(s);
  EXPECT_TRUE(of_kind(j, "straggler").empty());
  EXPECT_TRUE(of_kind(j, "slow_link").empty());
  // The pause is idle time of the whole job (no transfer, no synchronisation under way): not counted.
  EXPECT_TRUE(of_kind(j, "slow_iteration").empty());
  EXPECT_TRUE(j.findings.empty());
}

// A transient fault has a place: one link's transfers, or one rank's join, account for the iteration's
// excess.
TEST(AnalysisDiagnosis, TransientLinkGlitchOrStallIsASlowIterationThatNamesIt) {
  synth::Spec link;
  link.dp = 4;
  link.pp = 1;
  link.iters = 16;
  link.slow_node = 2;
  link.slow_factor = 1500;  // one iteration's gradient transfers from n2 take ~0.7 s instead of 0.5 ms
  link.slow_from = link.slow_to = 9;
  synth::Spec stall = link;
  stall.slow_node = -1;
  stall.straggler_node = 1;
  stall.straggler_factor = 4;
  stall.straggler_from = stall.straggler_to = 9;
  for (auto& [spec, place] : {std::pair{link, std::string("n2->")}, {stall, std::string("n1 joined")}}) {
    Job j = run(spec);
    auto f = of_kind(j, "slow_iteration");
    ASSERT_EQ(f.size(), 1u) << place;
    EXPECT_NEAR(f[0].first_iteration, 8, 1);  // index 0 is the generator's iteration 1
    EXPECT_NE(f[0].evidence.find(place), std::string::npos) << f[0].evidence;
    EXPECT_TRUE(of_kind(j, "slow_link").empty()) << place;
    EXPECT_TRUE(of_kind(j, "straggler").empty()) << place;
  }
}

namespace {
// DP2 x PP2 whose node n2 sends 8x slower from iteration 6.
synth::Spec slow_link_spec() {
  synth::Spec s;
  s.dp = 2;
  s.pp = 2;
  s.iters = 14;
  s.slow_node = 2;
  s.slow_factor = 8;
  s.slow_from = 6;
  return s;
}
}  // namespace

TEST(AnalysisDiagnosis, SlowLinkNamesAPairWithTheNode) {
  Job j = run(slow_link_spec());
  auto f = of_kind(j, "slow_link");
  ASSERT_FALSE(f.empty());
  EXPECT_NE(f[0].subject.find("n2"), std::string::npos) << f[0].subject;
  EXPECT_TRUE(f[0].whatif_step_time_ms);
}

// With agents on both ends, a shaped link shows in the receiver's view: the sender's data leaves in quick
// bursts (as its congestion window allows, before the shaper's queue) and trickles in at the link's rate.
TEST(AnalysisDiagnosis, SlowLinkIsReadFromArrivalsWhereTheReceiverSawThem) {
  synth::Spec s = slow_link_spec();
  s.both_observers = true;
  Input in;
  synth::generate(s, in);
  // The slow node's departures as its egress hook sees them: a twentieth of the time on the wire.
  for (auto& e : in.events)
    if (e.dir == NP_DIR_EGRESS && e.src == synth::node_addr(s, 2))
      e.last_ns = e.first_ns + (e.last_ns - e.first_ns) / 20;
  auto r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  auto f = of_kind(r.jobs[0], "slow_link");
  ASSERT_FALSE(f.empty());
  EXPECT_NE(f[0].subject.find("n2"), std::string::npos) << f[0].subject;
  EXPECT_NE(f[0].evidence.find("MB/s"), std::string::npos);
}

// A 2x slow host link in a DP4 ring slows the node's in- and out-directions, which go to two different
// peers: one finding for the node's link (not one per direction), named within 4 iterations of the onset.
TEST(AnalysisDiagnosis, SlowHostLinkInARingIsOneFindingForTheNode) {
  synth::Spec s;
  s.dp = 4;
  s.pp = 1;
  s.iters = 14;
  s.slow_node = 2;
  s.slow_both = true;
  s.slow_factor = 2;
  s.slow_from = 6;
  Job j = run(s);
  auto f = of_kind(j, "slow_link");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].subject.find("n2"), std::string::npos) << f[0].subject;
  EXPECT_NE(f[0].evidence.find("the link of n2"), std::string::npos) << f[0].evidence;
  EXPECT_GE(f[0].first_iteration, 5);
  EXPECT_LE(f[0].first_iteration, 7);
  EXPECT_TRUE(of_kind(j, "straggler").empty());
  // Only the node's outgoing directions slow (its peer's incoming): no node explains them all, the direction
  // is named as before.
  s.slow_both = false;
  auto g = of_kind(run(s), "slow_link");
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].subject, "n2->n3");
  EXPECT_EQ(g[0].evidence.find("the link of"), std::string::npos) << g[0].evidence;
}

// Links paced by their hosts' CPUs (unshaped veths beside CPU burners) spread over a factor of 2-6, some
// lastingly faster than others; a node starved for several iterations then runs at a fraction of the others,
// as a slow link would, but no slower than its comparable links are from one another. Over 20 generated DP8
// rings (links spread sigma 0.7, node n2 2x slower in iterations 6-11), 1 job has a slow_link finding (18
// without the comparison noise: diagnosis_link.cpp); the same node at half a common line rate (links within
// a few percent of one another) is still named.
TEST(AnalysisDiagnosis, NodeSlowerThanWidelySpreadLinksIsNoSlowLink) {
  synth::Spec s;
  s.dp = 8;
  s.pp = 1;
  s.iters = 14;
  s.link_mbps = 200;  // transfers long against the generator's fixed 30 us, so the spread is the links'
  s.slow_node = 2;
  s.slow_both = true;
  s.slow_factor = 2;
  s.slow_from = 6;
  s.slow_to = 11;
  s.link_spread = 0.7;
  int flagged = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    s.seed = seed;
    flagged += !of_kind(run(s), "slow_link").empty();
  }
  EXPECT_LE(flagged, 1);
  s.seed = 1;
  s.link_spread = 0.03;
  s.slow_to = 1 << 30;
  auto f = of_kind(run(s), "slow_link");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].evidence.find("the link of n2"), std::string::npos) << f[0].evidence;
}

TEST(AnalysisDiagnosis, HangDetectedLiveWithinTheBoundAndNotBefore) {
  synth::Spec s;
  s.iters = 14;
  s.hang_at = 8;
  s.teardown = false;
  Input in;
  synth::generate(s, in);
  uint64_t last = 0;
  for (auto& e : in.events) last = std::max(last, e.last_ns);
  in.now_ns = last + 300'000'000;  // shortly after: not yet a hang
  auto early = analyze(in);
  ASSERT_EQ(early.jobs.size(), 1u);
  EXPECT_EQ(early.jobs[0].state, "running");
  double step_s = early.jobs[0].step_time_ms / 1e3;
  in.now_ns = last + static_cast<uint64_t>((std::max(3 * step_s, 2.0) + 1.0) * 1e9);
  auto late = analyze(in);
  EXPECT_EQ(late.jobs[0].state, "hung");
  auto f = of_kind(late.jobs[0], "hang");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_GT(f[0].start_ns, 0u);
}

// 1:N packet samples (sFlow) show a connection's teardown only if one of its FINs was sampled: a silent job
// is a hang only when an end would have shown more teardowns (diagnosis.cpp teardown_seen).
TEST(AnalysisDiagnosis, SampledSourceCallsASilenceAHangOnlyWhenAnEndWouldHaveShown) {
  synth::Spec s;
  s.dp = 4;
  s.pp = 2;
  s.iters = 14;
  s.hang_at = 8;
  s.teardown = false;
  auto state_at = [&](uint32_t one_in) {
    Input in;
    synth::generate(s, in);
    for (auto& e : in.events) e.sampled_1_in = one_in;
    in.offline = true;
    in.now_ns = 0;
    for (auto& e : in.events) in.now_ns = std::max(in.now_ns, e.last_ns + 10'000'000'000);
    auto r = analyze(in);
    EXPECT_EQ(r.jobs.size(), 1u);
    return r.jobs.empty() ? Job{} : r.jobs[0];
  };
  Job rare = state_at(1000);  // P(a teardown seen) 0.002 per connection: silence says nothing
  EXPECT_EQ(rare.state, "idle");
  EXPECT_TRUE(of_kind(rare, "hang").empty());
  Job dense = state_at(2);  // 0.75 per connection: an end would have shown
  EXPECT_EQ(dense.state, "hung");
  EXPECT_EQ(of_kind(dense, "hang").size(), 1u);
}

TEST(AnalysisDiagnosis, SampledTeardownsCountAgainstWhatTheSamplingCanShow) {
  synth::Spec s;
  s.dp = 4;
  s.pp = 2;
  s.iters = 10;
  Input in;
  synth::generate(s, in);
  // At 1:5 about a third of the connections show their FIN (1 - 0.8^2 = 0.36): keep every third's.
  std::map<std::pair<std::string, std::string>, int> pair_no;
  std::erase_if(in.events, [&](const FlowEvent& e) {
    if (!(e.tcp_flags & 0x01)) return false;
    auto key = std::minmax(e.src, e.dst);
    auto it = pair_no.try_emplace({key.first, key.second}, static_cast<int>(pair_no.size())).first;
    return it->second % 3 != 0;
  });
  in.offline = true;
  for (auto& e : in.events) in.now_ns = std::max(in.now_ns, e.last_ns + 10'000'000'000);
  auto full_view = analyze(in);
  ASSERT_EQ(full_view.jobs.size(), 1u);
  EXPECT_EQ(full_view.jobs[0].state, "hung");  // a full view that lost two thirds of its FINs: not an end
  for (auto& e : in.events) e.sampled_1_in = 5;
  auto sampled = analyze(in);
  ASSERT_EQ(sampled.jobs.size(), 1u);
  EXPECT_EQ(sampled.jobs[0].state, "ended");
  EXPECT_TRUE(of_kind(sampled.jobs[0], "hang").empty());
}

TEST(AnalysisDiagnosis, SlowIterationUsesRobustStatistics) {
  synth::Spec s;
  s.iters = 30;
  s.jitter_ms = 3;  // noisier job: 3 ms jitter per operation must not produce findings
  Job j = run(s);
  EXPECT_TRUE(of_kind(j, "slow_iteration").empty());
}

// Two iterations read as one (a missed boundary, as a 1:N packet sample's 1 s resolution now and then gives)
// take twice the time and carry twice the bytes; a slow link stretches one iteration and moves what it always
// does. Only the second is a slow iteration (diagnosis_iteration.cpp, kMergedVolume). Called on the stage
// directly: a ring of three nodes, 1 s iterations, each direction 1 MB in flight 200 ms an iteration; in the
// long iteration n1->n2 is in flight 900 ms (in the merged one, during its second half, as the sampled
// capture that needed this read it).
namespace {
std::vector<Finding> slow_iterations(bool merged) {
  constexpr uint64_t kS = 1'000'000'000, kMs = 1'000'000;
  Normalized n;
  n.nodes = {"n0", "n1", "n2"};
  JobSlice job;
  job.nodes = {0, 1, 2};
  std::vector<Iteration> its;
  uint64_t t = 0;
  for (int i = 0; i < 14; ++i) {
    bool long_one = i == 8;
    uint64_t dur = long_one ? 2 * kS : kS;
    its.push_back({i, t, t + dur, dur, {}, 0});
    for (uint64_t k = 0; k < (long_one && merged ? 2u : 1u); ++k)
      for (uint32_t src : {0u, 1u, 2u}) {
        bool stretched = long_one && src == 1 && k == (merged ? 1u : 0u);
        uint64_t t0 = t + k * kS + (stretched ? 50 : 700) * kMs;
        job.xfers.push_back(
            {src, (src + 1) % 3, src, 100, t0, t0 + (stretched ? 900 : 200) * kMs, 1'000'000});
      }
    t += dur;
  }
  std::sort(job.xfers.begin(), job.xfers.end(), [](const Xfer& a, const Xfer& b) { return a.t0 < b.t0; });
  std::vector<Finding> out;
  diagnosis_steps::slow_iteration_findings(n, job, Structure{}, Timeline{}, its, "j", out);
  return out;
}
}  // namespace

TEST(AnalysisDiagnosis, TwoIterationsReadAsOneAreNoSlowIteration) {
  auto slow = slow_iterations(false);
  ASSERT_EQ(slow.size(), 1u);  // the slow link's iteration: n1->n2 in flight 700 ms longer
  EXPECT_EQ(slow[0].first_iteration, 8);
  EXPECT_NE(slow[0].evidence.find("n1->n2"), std::string::npos) << slow[0].evidence;
  EXPECT_TRUE(slow_iterations(true).empty());
}
