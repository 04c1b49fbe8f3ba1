// The daemon's streaming analysis (incremental.hpp) against analyze() over the same events: fed in arrival
// order, one pass per second of traffic, as the daemon does.
#include <gtest/gtest.h>

#include <algorithm>

#include "feed.hpp"
#include "incremental.hpp"
#include "synth.hpp"

using namespace netprism::analysis;

namespace {

constexpr uint64_t kSec = 1'000'000'000ull;

// Events in the order agents deliver them (by end time), so offline and streaming see the same order.
Input arrival_order(Input in) {
  std::stable_sort(in.events.begin(), in.events.end(),
                   [](const FlowEvent& a, const FlowEvent& b) { return a.last_ns < b.last_ns; });
  return in;
}

// Feeds `in` second by second (a pass after each) and returns the last pass' result at `now`.
Result stream(StreamingAnalysis& sa, const Input& in, uint64_t now, std::vector<uint64_t>* tail = nullptr) {
  sa.set_addr_nodes(in.addr_node);
  uint64_t t = in.events.front().last_ns + kSec;
  Result r;
  size_t i = 0;
  while (i < in.events.size()) {
    while (i < in.events.size() && in.events[i].last_ns <= t) add_event(sa, in.events[i++]);
    r = sa.pass(std::min(t, now));
    if (tail) tail->push_back(sa.stats().tail_xfers);
    t += kSec;
  }
  return sa.pass(now);
}

// A synthetic job's events in the order the daemon receives them.
Input arrivals_of(const synth::Spec& s) {
  Input in;
  synth::generate(s, in);
  return arrival_order(std::move(in));
}

// The events streamed into `sa`, and analysed offline at the same moment: half a second after the last one.
std::pair<Result, Result> live_and_offline(StreamingAnalysis& sa, Input& in,
                                           std::vector<uint64_t>* tail = nullptr) {
  uint64_t now = in.events.back().last_ns + kSec / 2;
  Result live = stream(sa, in, now, tail);
  in.now_ns = now;
  return {std::move(live), analyze(in)};
}

void expect_same_jobs(const Result& live, const Result& off, size_t jobs) {
  ASSERT_EQ(off.jobs.size(), jobs);
  ASSERT_EQ(live.jobs.size(), off.jobs.size());
  for (size_t k = 0; k < off.jobs.size(); ++k) {
    const Job &a = live.jobs[k], &b = off.jobs[k];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.nodes, b.nodes);
    EXPECT_EQ(a.state, b.state);
    EXPECT_EQ(a.parallelism.dp, b.parallelism.dp);
    EXPECT_EQ(a.parallelism.pp, b.parallelism.pp);
    EXPECT_EQ(a.parallelism.dp_groups, b.parallelism.dp_groups);
    EXPECT_EQ(a.parallelism.stages, b.parallelism.stages);
    EXPECT_GE(b.iterations.size(), 10u);
    ASSERT_EQ(a.iterations.size(), b.iterations.size()) << a.id;
    for (size_t i = 0; i < a.iterations.size(); ++i) {
      EXPECT_EQ(a.iterations[i].index, b.iterations[i].index);
      EXPECT_EQ(a.iterations[i].start_ns, b.iterations[i].start_ns) << "iteration " << i;
      EXPECT_EQ(a.iterations[i].end_ns, b.iterations[i].end_ns) << "iteration " << i;
    }
  }
}

}  // namespace

// Runs shorter than the tail are re-analysed whole every pass: the result is exactly analyze()'s.
TEST(StreamingAnalysis, ShortRunsMatchOfflineExactly) {
  for (auto [dp, pp, gpipe] : {std::tuple{2, 2, false}, std::tuple{4, 1, false}, std::tuple{1, 4, true}}) {
    synth::Spec s;
    s.dp = dp;
    s.pp = pp;
    s.gpipe = gpipe;
    s.iters = 20;
    s.both_observers = false;
    Input in = arrivals_of(s);
    StreamingAnalysis sa;
    auto [live, off] = live_and_offline(sa, in);
    SCOPED_TRACE(testing::Message() << "dp" << dp << " pp" << pp << (gpipe ? " gpipe" : " 1f1b"));
    expect_same_jobs(live, off, 1);
  }
}

TEST(StreamingAnalysis, TwoJobsAtOnceMatchOffline) {
  synth::Spec a, b;
  a.dp = 2, a.pp = 2, a.iters = 15;
  b.dp = 4, b.pp = 1, b.iters = 15, b.node_base = 4, b.port_base = 41000, b.subnet = "10.0.1.";
  b.start_ns = a.start_ns + 700'000'000;
  Input in;
  synth::generate(a, in);
  synth::generate(b, in);
  in = arrival_order(std::move(in));
  uint64_t end = in.events.back().last_ns;
  StreamingAnalysis sa;
  Result live = stream(sa, in, end + kSec / 2);
  in.now_ns = end + kSec / 2;
  expect_same_jobs(live, analyze(in), 2);
}

// A run longer than the tail: later passes re-analyse only the tail and stitch it onto the settled history.
// Same iterations as offline, and the work per pass stops growing with the history.
TEST(StreamingAnalysis, LongRunStitchedMatchesOfflineWithBoundedWork) {
  synth::Spec s;
  s.dp = 2;
  s.pp = 2;
  s.iters = 160;  // ~0.5 s steps: 80 s, well past the 30 s tail
  Input in = arrivals_of(s);
  StreamingAnalysis sa;
  std::vector<uint64_t> tail;
  auto [live, off] = live_and_offline(sa, in, &tail);
  expect_same_jobs(live, off, 1);
  EXPECT_EQ(sa.stats().restitched, 0u);
  ASSERT_GT(tail.size(), 60u);
  // The last passes look at ~30 s of traffic (the tail), not at the 80 s of history.
  uint64_t total = 0;
  for (const auto& f : in.events) total += f.payload_bytes > 0 ? 1 : 0;
  EXPECT_LT(tail.back(), total / 2);
  EXPECT_LE(tail.back(), tail[tail.size() / 2] * 5 / 4);
}

// The same for pipelines without DP, whose boundaries are the first stage's first activations (their
// transfers' ends, see timeline_pipeline.cpp): a tail that starts at such a boundary must still see the whole
// iteration that begins there, or its first iteration drains early and the stitch disagrees with offline.
TEST(StreamingAnalysis, LongPipelineRunStitchedMatchesOffline) {
  for (auto [pp, gpipe] : {std::tuple{2, false}, std::tuple{3, true}}) {
    SCOPED_TRACE(testing::Message() << "dp1 pp" << pp << (gpipe ? " gpipe" : " 1f1b"));
    synth::Spec s;
    s.dp = 1;
    s.pp = pp;
    s.gpipe = gpipe;
    s.iters = 120;  // ~0.5 s steps: 60 s, past the 30 s tail
    s.both_observers = false;
    Input in = arrivals_of(s);
    StreamingAnalysis sa;
    auto [live, off] = live_and_offline(sa, in);
    EXPECT_EQ(off.jobs[0].iterations.size(), 119u);
    expect_same_jobs(live, off, 1);
    EXPECT_EQ(sa.stats().restitched, 0u);
  }
}

// The transfer bound holds and what it evicts is counted.
TEST(StreamingAnalysis, MemoryBoundIsHardAndCounted) {
  synth::Spec s;
  s.dp = 4;
  s.pp = 1;
  s.iters = 40;
  Input in;
  synth::generate(s, in);
  in = arrival_order(std::move(in));
  StreamingAnalysis::Limits l;
  l.max_xfers = 2000;
  l.max_conns = 8;  // fewer than the job's connections (ring + control): the rest is refused, counted
  StreamingAnalysis sa(l);
  stream(sa, in, in.events.back().last_ns + kSec);
  EXPECT_LE(sa.stats().xfers, l.max_xfers);
  EXPECT_LE(sa.stats().conns, l.max_conns);
  EXPECT_GT(sa.stats().dropped_xfers + sa.stats().dropped_events, 0u);
}

// Connections silent for the window are forgotten; an address scan's strings are then renumbered away
// (generation() changes) and a later job is analysed as if alone.
TEST(StreamingAnalysis, ForgetsSilentConnectionsAndCompactsIds) {
  StreamingAnalysis::Limits l;
  l.window_ns = 10 * kSec;
  StreamingAnalysis sa(l);
  Input scan;
  for (int i = 0; i < 6000; ++i) {
    FlowEvent e;
    e.observer = "n0";
    e.src = "10.9.0.1";
    e.dst = "10.8." + std::to_string(i / 250) + "." + std::to_string(i % 250);
    e.src_port = 40000;
    e.dst_port = 22;
    e.proto = 6;
    e.dir = 1;
    e.first_ns = e.last_ns = 1'700'000'000'000'000'000ull + static_cast<uint64_t>(i) * 1000;
    e.packets = 1;
    e.bytes = 60;
    scan.events.push_back(e);
  }
  for (const auto& e : scan.events) add_event(sa, e);
  sa.pass(scan.events.back().last_ns + kSec);
  EXPECT_EQ(sa.stats().conns, 6000u);
  uint64_t gen = sa.generation();

  synth::Spec s;
  s.dp = 2;
  s.pp = 2;
  s.iters = 20;
  s.start_ns = scan.events.back().last_ns + 60 * kSec;  // long after the scan left the window
  Input in = arrivals_of(s);
  auto [live, off] = live_and_offline(sa, in);
  EXPECT_NE(sa.generation(), gen);
  EXPECT_LT(sa.stats().conns, 100u);
  expect_same_jobs(live, off, 1);
}

// The daemon adds each stored batch's events as one run (add(span), which prefetches ahead): the state it
// builds must be exactly the one adding them one by one builds -- same jobs, iterations and counters.
TEST(StreamingAnalysis, RunsOfEventsAddExactlyAsOneByOne) {
  synth::Spec a, b;
  a.dp = 2, a.pp = 2, a.iters = 60;
  b.dp = 4, b.pp = 1, b.iters = 60, b.node_base = 4, b.port_base = 41000, b.subnet = "10.0.1.";
  Input in;
  synth::generate(a, in);
  synth::generate(b, in);
  in = arrival_order(std::move(in));
  StreamingAnalysis one, runs;
  one.set_addr_nodes(in.addr_node);
  runs.set_addr_nodes(in.addr_node);
  uint64_t t = in.events.front().last_ns + kSec;
  std::size_t i = 0, passes = 0;
  std::vector<StreamingAnalysis::Event> run;
  while (i < in.events.size()) {
    std::size_t j = i;
    while (j < in.events.size() && in.events[j].last_ns <= t) ++j;
    for (std::size_t k = i; k < j; ++k) one.add(stream_event(one, in.events[k]));
    for (std::size_t k = i; k < j; k += 37) {  // runs of 37: not a divisor of anything in the input
      run.clear();
      for (std::size_t m = k; m < std::min(j, k + 37); ++m) run.push_back(stream_event(runs, in.events[m]));
      runs.add(run);
    }
    i = j;
    Result r1 = one.pass(t), r2 = runs.pass(t);
    ASSERT_EQ(r1.jobs.size(), r2.jobs.size()) << "pass " << passes;
    for (std::size_t k = 0; k < r1.jobs.size(); ++k) {
      EXPECT_EQ(r1.jobs[k].id, r2.jobs[k].id);
      EXPECT_EQ(r1.jobs[k].nodes, r2.jobs[k].nodes);
      ASSERT_EQ(r1.jobs[k].iterations.size(), r2.jobs[k].iterations.size()) << "pass " << passes;
      for (std::size_t n = 0; n < r1.jobs[k].iterations.size(); ++n) {
        EXPECT_EQ(r1.jobs[k].iterations[n].start_ns, r2.jobs[k].iterations[n].start_ns);
        EXPECT_EQ(r1.jobs[k].iterations[n].end_ns, r2.jobs[k].iterations[n].end_ns);
      }
    }
    EXPECT_EQ(one.stats().events, runs.stats().events);
    EXPECT_EQ(one.stats().xfers, runs.stats().xfers);
    EXPECT_EQ(one.stats().conns, runs.stats().conns);
    ++passes;
    t += kSec;
  }
  EXPECT_GT(passes, 20u);
  EXPECT_EQ(one.pass(t).jobs.size(), 2u);
}

// With a pass budget too small for more than one job, every pass still re-analyses one due job, the one the
// last pass deferred first: each job's iterations keep coming (a pass later at most per other due job), the
// put-off re-analyses are counted, and once the data stops the result is offline's.
TEST(StreamingAnalysis, PassBudgetDefersRoundRobinAndCounts) {
  synth::Spec a, b;
  a.dp = 2, a.pp = 2, a.iters = 40;
  b.dp = 4, b.pp = 1, b.iters = 40, b.node_base = 4, b.port_base = 41000, b.subnet = "10.0.1.";
  b.start_ns = a.start_ns + 700'000'000;
  Input in;
  synth::generate(a, in);
  synth::generate(b, in);
  in = arrival_order(std::move(in));
  StreamingAnalysis::Limits lim;
  lim.pass_budget_ns = 1;  // spent by the first re-analysis of every pass
  StreamingAnalysis sa(lim);
  const uint64_t end = in.events.back().last_ns;
  Result live = stream(sa, in, end + kSec / 2);
  EXPECT_GT(sa.stats().deferred, 0u);
  for (int k = 0; k < 4; ++k) live = sa.pass(end + kSec / 2);  // one job per pass: both catch up
  in.now_ns = end + kSec / 2;
  expect_same_jobs(live, analyze(in), 2);
}

// A hung job with nothing new is re-analysed as its silence grows by a quarter (at least every
// kStaleNs), not every pass; it still reads as analyze() reads it at the same moment.
TEST(StreamingAnalysis, SettledJobIsRecheckedAsItsSilenceGrowsNotEveryPass) {
  synth::Spec a;
  a.iters = 20, a.hang_at = 14, a.teardown = false;
  Input in = arrivals_of(a);
  StreamingAnalysis::Limits lim;
  lim.pass_budget_ns = 1'000'000'000'000ull;  // never spent: only keeps every job's last result (has_last)
  StreamingAnalysis sa(lim);
  const uint64_t end = in.events.back().last_ns;
  Result live = stream(sa, in, end + kSec);
  uint64_t hung_at = 0, rechecks = 0;
  for (uint64_t t = end + 2 * kSec; t <= end + 120 * kSec; t += kSec) {
    const uint64_t before = sa.stats().analysed;
    live = sa.pass(t);
    ASSERT_EQ(live.jobs.size(), 1u);
    if (hung_at == 0 && live.jobs[0].state == "hung") hung_at = t;
    if (hung_at != 0 && t > hung_at) rechecks += sa.stats().analysed - before;
  }
  ASSERT_NE(hung_at, 0u);
  // Silence from ~5 s to 120 s: every 5 s up to 20 s, then each a quarter longer than the last (~12);
  // before, every one of the ~115 passes.
  EXPECT_GE(rechecks, 6u);
  EXPECT_LE(rechecks, 20u);
  in.now_ns = end + 120 * kSec;
  Result off = analyze(in);
  ASSERT_EQ(off.jobs.size(), 1u);
  EXPECT_EQ(live.jobs[0].state, off.jobs[0].state);
  EXPECT_EQ(live.jobs[0].iterations.size(), off.jobs[0].iterations.size());
  ASSERT_EQ(live.jobs[0].findings.size(), off.jobs[0].findings.size());
  for (size_t k = 0; k < off.jobs[0].findings.size(); ++k) {
    EXPECT_EQ(live.jobs[0].findings[k].kind, off.jobs[0].findings[k].kind);
    EXPECT_EQ(live.jobs[0].findings[k].subject, off.jobs[0].findings[k].subject);
  }
}

// A long job (stitched: its history is past the tail) that hangs and is then left silent: its connections
// leave the window one by one as each falls silent for it. While the job is still reported it keeps every
// iteration it had; it is never reported with fewer (the 30-minute live_scale runs logged stopped synthetic
// jobs going from 47-419 iterations to 0, then deleted as regrouped).
TEST(StreamingAnalysis, HungJobKeepsItsIterationsUntilItLeavesTheWindow) {
  synth::Spec s;
  s.dp = 2;
  s.pp = 2;
  s.iters = 160;
  s.hang_at = 150;
  s.teardown = false;
  Input in = arrivals_of(s);
  StreamingAnalysis::Limits lim;
  lim.window_ns = 120 * kSec;  // short window, same rules: connections silent this long are forgotten
  lim.pass_budget_ns = 400'000'000ull;
  StreamingAnalysis sa(lim);
  const uint64_t end = in.events.back().last_ns;
  Result r = stream(sa, in, end + kSec / 2);
  ASSERT_EQ(r.jobs.size(), 1u);
  const size_t its = r.jobs[0].iterations.size();
  ASSERT_GE(its, 140u);
  size_t reported = 0;
  for (uint64_t t = end + kSec; t < end + lim.window_ns + 200 * kSec; t += kSec) {
    r = sa.pass(t);
    for (const auto& j : r.jobs) {
      ASSERT_EQ(j.iterations.size(), its) << (t - end) / kSec << " s after the hang, state " << j.state;
      ++reported;
    }
  }
  EXPECT_GE(reported, 100u);    // reported while its connections were in the window
  EXPECT_TRUE(r.jobs.empty());  // and then gone, at once
}
