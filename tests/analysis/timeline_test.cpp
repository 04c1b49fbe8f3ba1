// Stage 4: one iteration per training iteration, durations against the generator's truth.
#include <gtest/gtest.h>

#include <cmath>

#include "netprism/flowlet.h"
#include "synth.hpp"

using namespace netprism::analysis;

namespace {
// Moves the events `pred` selects later by `by` ns (a delay, a stall, a late tail: what the network did).
template <class Pred>
void delay_events(Input& in, uint64_t by, Pred pred) {
  for (auto& e : in.events)
    if (pred(e)) {
      e.first_ns += by;
      e.last_ns += by;
    }
}

// Errors of netprism's durations against the truth iterations they overlap most (matching by time).
std::vector<double> duration_errors(const Job& j, const synth::Truth& t) {
  std::vector<double> errs;
  for (const auto& it : j.iterations) {
    // Truth iteration k = [b[k-1], b[k]]; pick the one whose end is nearest netprism's end.
    size_t best = 1;
    for (size_t k = 1; k < t.boundaries.size(); ++k)
      if (std::llabs(static_cast<long long>(t.boundaries[k] - it.end_ns)) <
          std::llabs(static_cast<long long>(t.boundaries[best] - it.end_ns)))
        best = k;
    double d = static_cast<double>(t.boundaries[best] - t.boundaries[best - 1]);
    errs.push_back(std::fabs(static_cast<double>(it.duration_ns) - d) / d);
  }
  return errs;
}

class AnalysisTimeline : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};
}  // namespace

TEST_P(AnalysisTimeline, EveryIterationWithAccurateDuration) {
  auto [dp, pp, gpipe] = GetParam();
  synth::Spec s;
  s.dp = dp;
  s.pp = pp;
  s.gpipe = gpipe;
  s.iters = 20;
  Input in;
  auto truth = synth::generate(s, in);
  auto r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  const Job& j = r.jobs[0];
  // The first iteration has no preceding boundary: 19 complete iterations between 20 boundaries.
  EXPECT_EQ(j.iterations.size(), truth.boundaries.size() - 1);
  for (size_t i = 0; i + 1 < j.iterations.size(); ++i) {
    EXPECT_EQ(j.iterations[i].end_ns, j.iterations[i + 1].start_ns);
    EXPECT_EQ(j.iterations[i].index, static_cast<int>(i));
  }
  auto e = duration_errors(j, truth);
  std::sort(e.begin(), e.end());
  ASSERT_FALSE(e.empty());
  // The generator's per-operation jitter is 0.3 ms on ~0.5 s steps, so the truth itself is steady to ~0.1 %.
  EXPECT_LT(e[e.size() / 2], 0.003);
  EXPECT_LT(e[e.size() * 95 / 100], 0.01);
  EXPECT_NEAR(j.step_time_ms, static_cast<double>(j.iterations[5].duration_ns) / 1e6, 0.05 * j.step_time_ms);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AnalysisTimeline,
                         ::testing::Values(std::make_tuple(4, 1, false), std::make_tuple(1, 4, false),
                                           std::make_tuple(1, 4, true), std::make_tuple(1, 2, false),
                                           std::make_tuple(2, 2, false), std::make_tuple(2, 2, true),
                                           std::make_tuple(2, 3, false)));

TEST(AnalysisTimeline, PhasesPerNodeInsideTheIteration) {
  synth::Spec s;
  Input in;
  synth::generate(s, in);
  auto r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  const auto& it = r.jobs[0].iterations.at(3);
  size_t pipeline = 0, sync = 0;
  for (const auto& p : it.phases) {
    EXPECT_GE(p.start_ns, it.start_ns);
    EXPECT_LE(p.end_ns, it.end_ns + it.duration_ns / 10);
    pipeline += p.name == "pipeline";
    sync += p.name == "dp_sync";
  }
  EXPECT_EQ(pipeline, 4u);
  EXPECT_EQ(sync, 4u);
}

// The live aggregator holds each iteration in the engine's history, a pass' result and the published
// snapshot: the copies share one list of phases, and the history dropping an old iteration's phases
// (kMaxPhases) leaves what a published snapshot holds intact.
TEST(Timeline, CopiesOfAnIterationShareItsPhases) {
  Iteration it;
  it.phases = std::vector<Phase>{{"n0", "compute", 1, 2}, {"n1", "dp_sync", 2, 3}};
  Iteration copy = it;
  ASSERT_EQ(copy.phases.size(), 2u);
  EXPECT_EQ(&copy.phases[0], &it.phases[0]);  // one list, not two
  it.phases.clear();
  EXPECT_TRUE(it.phases.empty());
  ASSERT_EQ(copy.phases.size(), 2u);
  EXPECT_EQ(copy.phases[1].name, "dp_sync");
  EXPECT_EQ(std::distance(copy.phases.begin(), copy.phases.end()), 2);
  EXPECT_TRUE(Iteration{}.phases.empty());
}

// Receivers' views (agents' ingress): a synchronisation ends at its members when the last data arrives.
// The same DP2 x PP2 job seen by both observers, once as is and once with every arrival at the receivers
// stamped `move` ns later (0 - x: earlier): every iteration end must move by `want` ns (within 1 ms).
void iteration_ends_move(uint64_t move, double want) {
  synth::Spec s;
  s.both_observers = true;
  Input plain, moved;
  synth::generate(s, plain);
  synth::generate(s, moved);
  delay_events(moved, move, [](const FlowEvent& e) { return e.dir == NP_DIR_INGRESS; });
  auto a = analyze(plain), b = analyze(moved);
  ASSERT_EQ(a.jobs.size(), 1u);
  ASSERT_EQ(b.jobs.size(), 1u);
  const auto &ia = a.jobs[0].iterations, &ib = b.jobs[0].iterations;
  ASSERT_EQ(ia.size(), ib.size());
  ASSERT_GE(ia.size(), 8u);
  for (size_t i = 0; i < ia.size(); ++i)
    EXPECT_NEAR(static_cast<double>(ib[i].end_ns) - static_cast<double>(ia[i].end_ns), want, 1e6)
        << "iteration " << i;
}

// Every arrival 15 ms later than the data left (data queued on a shaped link, which the sender's view
// cannot show): the iteration ends move by those 15 ms, and the durations stay.
TEST(AnalysisTimeline, SyncEndsFollowTheReceiversArrivals) {
  iteration_ends_move(15'000'000, 15e6);
}

// A receiver whose clock runs behind its sender's stamps an arrival before its send: each synchronisation's
// first piece then arrives "before" its episode began. It is still that synchronisation's, not the previous
// one's (whose end it moved a whole step late, merging two iterations, in a soft-RoCE run 49 us behind).
TEST(AnalysisTimeline, AReceiverClockSlightlyBehindMovesNoSynchronisation) {
  iteration_ends_move(0 - uint64_t{300'000}, 0);  // 0.3 ms behind: the ends stay
}

// A pause of every rank (a checkpoint) makes one drain-to-first-activation gap far longer than the others:
// still one iteration, not a reason to take the ordinary gaps for crossings of the 1F1B balance.
TEST(AnalysisTimeline, PipelinePauseIsOneLongIteration) {
  for (auto [pp, gpipe] : {std::tuple{4, false}, std::tuple{2, false}, std::tuple{3, true}}) {
    SCOPED_TRACE(testing::Message() << "dp1 pp" << pp << (gpipe ? " gpipe" : " 1f1b"));
    synth::Spec s;
    s.dp = 1;
    s.pp = pp;
    s.gpipe = gpipe;
    s.iters = 14;
    s.pause_at = 6;
    s.pause_ms = 1500;
    Input in;
    auto truth = synth::generate(s, in);
    auto r = analyze(in);
    ASSERT_EQ(r.jobs.size(), 1u);
    EXPECT_EQ(r.jobs[0].iterations.size(), truth.boundaries.size() - 1);
    auto e = duration_errors(r.jobs[0], truth);
    std::sort(e.begin(), e.end());
    ASSERT_FALSE(e.empty());
    EXPECT_LT(e[e.size() / 2], 0.003);
  }
}

// A shaped link drops packets; the retransmission timeout can stall a DP synchronisation for as long as the
// compute between iterations (the slowlink testbed run: 380 ms without a packet inside one all-reduce of the
// last stage, right after the fault's onset). The stall splits that synchronisation into two complete-looking
// episodes. No pipeline send of the stage falls between them (it only sends again in its next iteration), so
// they are one synchronisation: every iteration is still found, none split, and the later ones are not paired
// with the previous iteration's synchronisation of the slow stage.
TEST(AnalysisTimeline, StalledSynchronisationOfAShapedStageStaysOneIteration) {
  synth::Spec s;
  s.iters = 14;
  s.slow_node = 2;  // stage 1, replica 0: its all-reduce chunk now takes ~160 ms
  s.slow_factor =
      600;  // 3.3 MB/s: the step grows from ~455 to ~700 ms, the stage ends ~235 ms after the first
  s.slow_from = 7;
  Input plain;
  auto truth = synth::generate(s, plain);
  // The stall: inside the last stage's synchronisation of iteration 8 (after the onset), after its first
  // chunks, everything pauses for kStall (what comes after is delayed by it, as a stalled all-reduce delays
  // the whole job).
  const uint64_t kStall = 400'000'000;
  const size_t k = 8;
  const std::string a = synth::node_addr(s, 2), b = synth::node_addr(s, 3);
  uint64_t split = 0;  // the second step of that ring: the latest DP start of the stage before its end
  for (const auto& e : plain.events)
    if (((e.src == a && e.dst == b) || (e.src == b && e.dst == a)) && e.bytes > 0 &&
        e.first_ns < truth.boundaries[k] && e.first_ns > truth.boundaries[k - 1])
      split = std::max(split, e.first_ns);
  ASSERT_GT(split, truth.boundaries[k - 1]);
  Input stalled = plain;
  delay_events(stalled, kStall, [&](const FlowEvent& e) { return e.first_ns >= split; });
  // The reference: the same run without the stall, its boundaries after the stall moved by it.
  auto r0 = analyze(plain), r = analyze(stalled);
  ASSERT_EQ(r0.jobs.size(), 1u);
  ASSERT_EQ(r.jobs.size(), 1u);
  const auto &want = r0.jobs[0].iterations, &got = r.jobs[0].iterations;
  ASSERT_EQ(want.size(), truth.boundaries.size() - 1);
  ASSERT_EQ(got.size(), want.size());
  double step = static_cast<double>(truth.boundaries[6] - truth.boundaries[5]);
  for (size_t i = 0; i < got.size(); ++i) {
    uint64_t w = want[i].end_ns >= split ? want[i].end_ns + kStall : want[i].end_ns;
    EXPECT_LT(std::fabs(static_cast<double>(got[i].end_ns) - static_cast<double>(w)), 0.05 * step)
        << "iteration " << i;
  }
}

// A member on a shaped link can get its synchronisation's last data long after its peers finished: the
// shaper dropped the tail and the sender retransmits it after a timeout (206 ms late in a slowlink run, more
// than half a step). The member's all-reduce returns only then, and so does its next pass: the late data
// still ends that synchronisation for it, and the boundary (the median of the members' ends) moves with it.
TEST(AnalysisTimeline, LateRetransmissionEndsTheSynchronisationOfItsMember) {
  synth::Spec s;
  s.iters = 14;
  s.slow_node = 2;
  s.slow_factor = 600;
  s.slow_from = 7;
  Input in;
  auto truth = synth::generate(s, in);
  const size_t k = 9;
  const uint64_t split = truth.boundaries[k];  // the end of the last stage's synchronisation of iteration k
  const uint64_t kLate = 400'000'000;          // the retransmission timeout and the wait that follows
  delay_events(in, kLate, [&](const FlowEvent& e) { return e.first_ns >= split; });
  // The retransmitted tail, from the other member to the slow one (its sender's view).
  const std::string a = synth::node_addr(s, 3), b = synth::node_addr(s, 2);
  for (const auto& e : in.events)
    if (e.src == a && e.dst == b && e.bytes > 0) {
      auto r = e;
      r.first_ns = split + kLate - 1'000'000;
      r.last_ns = split + kLate - 900'000;
      r.bytes = r.payload_bytes = 25'000;
      r.packets = 18;
      in.events.push_back(r);
      break;
    }
  std::sort(in.events.begin(), in.events.end(),
            [](const FlowEvent& x, const FlowEvent& y) { return x.first_ns < y.first_ns; });
  auto r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  const auto& its = r.jobs[0].iterations;
  EXPECT_EQ(its.size(), truth.boundaries.size() - 1);
  // The iteration ending nearest the synchronisation: it ends at the median of its two members' ends, the
  // other member's (split) and the slow member's (the retransmission's end), i.e. half-way between them.
  const double want = static_cast<double>(split) + 0.5 * static_cast<double>(kLate);
  double best = 1e18;
  for (const auto& it : its) best = std::min(best, std::fabs(static_cast<double>(it.end_ns) - want));
  double step = static_cast<double>(truth.boundaries[6] - truth.boundaries[5]);
  EXPECT_LT(best, 0.05 * step);
}

// A benign pause of every rank halfway through a run (the testbed's pause recording: 12 iterations of
// 470 ms, 1.5 s pause after the sixth) whose first iteration's quiet is a little longer than the rest (a
// slow first step, as real runs have: 60 and 120 ms here). The pause then looks like the forward pass of
// iterations six times as long (its first synchronisation alone before the first end, the next five before
// the pause), a reading of the DP volume that e2e_live_pause once took: 11 iterations read as one of 4.4 s.
// The partial leading stretch is not evidence for it, so every iteration stays, the pause's one long.
TEST(AnalysisTimeline, PauseHalfwayWithASlowFirstStepKeepsEveryIteration) {
  const std::string dir = std::string(NP_SAMPLES_DIR) + "/pause";
  for (uint64_t slower_ms : {0, 60, 120}) {
    SCOPED_TRACE(testing::Message() << "first quiet " << slower_ms << " ms longer");
    std::string err;
    auto in = load_csv(dir + "/flows.csv.gz", dir + "/topology.txt", err);
    ASSERT_TRUE(in) << err;
    // The end of the first DP synchronisation of the first stage (n0 <-> n1): its first large transfer.
    uint64_t first_sync_end = UINT64_MAX;
    for (const auto& e : in->events)
      if (e.bytes > 100'000 && ((e.src == "10.213.33.1" && e.dst == "10.213.33.2") ||
                                (e.src == "10.213.33.2" && e.dst == "10.213.33.1")))
        first_sync_end = std::min(first_sync_end, e.last_ns);
    ASSERT_NE(first_sync_end, UINT64_MAX);
    const uint64_t cut = first_sync_end + 5'000'000;
    delay_events(*in, slower_ms * 1'000'000, [&](const FlowEvent& e) { return e.first_ns > cut; });
    auto r = analyze(*in);
    ASSERT_EQ(r.jobs.size(), 1u);
    const auto& its = r.jobs[0].iterations;
    ASSERT_EQ(its.size(), 11u);  // 12 synchronisations seen: 11 whole iterations between them
    size_t long_ones = 0;
    for (const auto& it : its) long_ones += it.duration_ns > 1'500'000'000 ? 1 : 0;
    EXPECT_EQ(long_ones, 1u);  // the pause's iteration, and only it
  }
}
