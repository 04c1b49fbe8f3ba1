// Stage 2: training-connection filter and job grouping.
#include <gtest/gtest.h>

#include "stages.hpp"
#include "synth.hpp"

using namespace netprism::analysis;

TEST(AnalysisGrouping, ControlTrafficIsNotTraining) {
  synth::Spec s;
  Input in;
  synth::generate(s, in);
  Normalized n = normalize(in);
  auto keep = training_connections(n);
  for (size_t c = 0; c < n.conns.size(); ++c)
    if (n.conns[c].bytes_ab + n.conns[c].bytes_ba < 10000) {
      EXPECT_FALSE(keep[c]) << n.conns[c].label;
    }
  auto jobs = group_jobs(n);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].nodes.size(), 4u);
}

TEST(AnalysisGrouping, ConcurrentJobsOnDisjointNodesStayApart) {
  Input in;
  synth::Spec a;
  a.dp = 2;
  a.pp = 2;
  synth::Spec b;
  b.dp = 1;
  b.pp = 3;
  b.node_base = 4;
  b.fwd_ms = 17;
  b.start_ns = a.start_ns + 300'000'000;
  synth::generate(a, in);
  synth::generate(b, in);
  auto r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 2u);
  EXPECT_EQ(r.jobs[0].nodes, (std::vector<std::string>{"n0", "n1", "n2", "n3"}));
  EXPECT_EQ(r.jobs[1].nodes, (std::vector<std::string>{"n4", "n5", "n6"}));
  EXPECT_NE(r.jobs[0].id, r.jobs[1].id);
  EXPECT_EQ(r.jobs[1].parallelism.pp, 3);
  EXPECT_EQ(r.jobs[1].parallelism.dp, 1);
}

TEST(AnalysisGrouping, ASecondJobOnTheSameNodesIsANewJob) {
  Input in;
  synth::Spec a;
  a.iters = 8;
  Input tmp;
  synth::generate(a, in);
  uint64_t end = 0;
  for (auto& e : in.events) end = std::max(end, e.last_ns);
  synth::Spec b = a;
  b.start_ns = end + 5'000'000'000ull;
  b.seed = 7;
  b.port_base = 50000;  // a new process opens new connections
  synth::generate(b, in);
  auto r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 2u);
  EXPECT_EQ(r.jobs[0].nodes, r.jobs[1].nodes);
  EXPECT_NE(r.jobs[0].id, r.jobs[1].id);
  EXPECT_LT(r.jobs[0].last_ns, r.jobs[1].first_ns);
}

TEST(AnalysisGrouping, JobIdsAreStableAcrossReanalysis) {
  synth::Spec s;
  Input in;
  synth::generate(s, in);
  auto r1 = analyze(in);
  std::reverse(in.events.begin(), in.events.end());  // order of arrival must not matter
  auto r2 = analyze(in);
  ASSERT_EQ(r1.jobs.size(), 1u);
  ASSERT_EQ(r2.jobs.size(), 1u);
  EXPECT_EQ(r1.jobs[0].id, r2.jobs[0].id);
  EXPECT_EQ(job_id({"a", "b"}, 1'000'000'123), job_id({"a", "b"}, 1'000'000'999));
  EXPECT_NE(job_id({"a", "b"}, 1'000'000'000), job_id({"a", "c"}, 1'000'000'000));
}

// The coupling of two activities (job_grouping.cpp: rails of one job vs. tenants of one server).
TEST(AnalysisGrouping, ActivityCoupling) {
  constexpr uint64_t ms = 1'000'000;
  Intervals a, b, c;
  for (uint64_t k = 0; k < 20; ++k) {
    a.emplace_back(k * 100 * ms, k * 100 * ms + 20 * ms);                     // busy 20 ms of every 100
    b.emplace_back(k * 100 * ms + 50 * ms, k * 100 * ms + 70 * ms);           // the same, half a period later
    c.emplace_back(k * 100 * ms, k * 100 * ms + 10 * ms);                     // 10 ms of every 100
    c.emplace_back(k * 100 * ms + 10 * ms + ms / 2, k * 100 * ms + 20 * ms);  // a gap under 1 ms: one burst
  }
  EXPECT_EQ(busy_intervals(c).size(), 20u);
  EXPECT_NEAR(activity_coupling(busy_intervals(a), busy_intervals(c), UINT64_MAX), 1.0, 1e-9);
  EXPECT_LT(activity_coupling(busy_intervals(a), busy_intervals(b), UINT64_MAX), 0.0);
  // Only the last 100 ms judged: there both are busy together.
  Intervals d = a;
  d.front() = {10 * ms, 90 * ms};
  EXPECT_LT(activity_coupling(busy_intervals(a), busy_intervals(d), UINT64_MAX), 1.0);
  EXPECT_NEAR(activity_coupling(busy_intervals(a), busy_intervals(d), 100 * ms), 1.0, 1e-9);
}
