// Third-party traffic shapes (issue 17), on a SimAI flow export (tests/data/simai_job_c: one row per RDMA
// message on its own QP, 8 NICs per server mapped to two nodes). The dataset itself is scored against its
// truth by score_simai.py (analysis_simai_job_c); here the same records are re-cut the ways other real
// sources write them (a message split over several QPs, two tenants at once, a short recording) and fed to
// the daemon's streaming engine, which must agree with the offline analysis.
#include <gtest/gtest.h>

#include <algorithm>

#include "analysis.hpp"
#include "feed.hpp"
#include "incremental.hpp"

using namespace netprism::analysis;

namespace {

Input job_c() {
  std::string dir = std::string(NP_SIMAI_DIR) + "/simai_job_c/", err;
  auto in = load_csv(dir + "flows.csv", dir + "topology.txt", err);
  EXPECT_TRUE(in) << err;
  return in ? *in : Input{};
}

// job_c's truth (truth_nodes.json): one job on s0, s1; dp 2; iterations of 275.33 ms.
constexpr uint64_t kStep = 275'327'840;

void expect_job_c(const Job& j, const std::vector<std::string>& nodes, size_t iterations,
                  double step = static_cast<double>(kStep)) {
  EXPECT_EQ(j.nodes, nodes);
  EXPECT_EQ(j.parallelism.dp, 2);
  EXPECT_EQ(j.parallelism.pp, 1);
  EXPECT_EQ(j.parallelism.dp_groups, std::vector<std::vector<std::string>>{nodes});
  ASSERT_EQ(j.iterations.size(), iterations);
  for (const auto& it : j.iterations) EXPECT_NEAR(static_cast<double>(it.duration_ns), step, 0.003 * step);
  EXPECT_TRUE(j.findings.empty());
}

}  // namespace

TEST(ThirdPartyShapes, SimaiJobCNodeLevelJob) {
  Result r = analyze(job_c());
  ASSERT_EQ(r.jobs.size(), 1u);
  expect_job_c(r.jobs[0], {"s0", "s1"}, 3);
  EXPECT_EQ(r.jobs[0].parallelism.tp_hint, 8);  // one endpoint pair per rail
  EXPECT_EQ(r.jobs[0].state, "ended");          // the export stops with the job's traffic: no hang
}

// NCCL spreads one peer's message over several QPs (channels): each message as two half-size records on
// two more QPs of the same endpoint pair is the same job.
TEST(ThirdPartyShapes, MessagesSplitOverQueuePairs) {
  Input in = job_c(), split = in;
  split.events.clear();
  for (const FlowEvent& e : in.events)
    for (int k = 0; k < 2; ++k) {
      FlowEvent h = e;
      h.src_port = static_cast<uint16_t>(20000 + 2 * (e.src_port - 10000) + k);
      h.bytes = e.bytes / 2;
      split.events.push_back(h);
    }
  Result r = analyze(split);
  ASSERT_EQ(r.jobs.size(), 1u);
  expect_job_c(r.jobs[0], {"s0", "s1"}, 3);
}

// Two tenants at once on other servers, with another step: two jobs, each with its own groups and step.
TEST(ThirdPartyShapes, TwoTenantsOnDisjointServers) {
  Input in = job_c(), two = in;
  for (FlowEvent e : in.events) {
    auto move = [](std::string& ip) { ip.replace(0, 4, "12.0"); };  // 11.0.r.1 -> 12.0.r.1
    move(e.src);
    move(e.dst);
    e.first_ns = e.first_ns + 40'000'000;  // starts 40 ms later: the two are not in phase
    e.last_ns = e.last_ns + 40'000'000;
    two.events.push_back(e);
  }
  for (const auto& [ip, node] : in.addr_node)
    two.addr_node["12.0" + ip.substr(4)] = node == "s0" ? "s2" : "s3";
  std::stable_sort(two.events.begin(), two.events.end(),
                   [](const FlowEvent& a, const FlowEvent& b) { return a.first_ns < b.first_ns; });
  Result r = analyze(two);
  ASSERT_EQ(r.jobs.size(), 2u);
  expect_job_c(r.jobs[0], {"s0", "s1"}, 3);
  expect_job_c(r.jobs[1], {"s2", "s3"}, 3);
}

// Two tenants on the same two servers, each with its own NICs (16-GPU servers split 8 + 8, or two 8-NIC
// partitions): job_c beside a copy of itself on other addresses mapped to the same servers, 1.2x slower
// and `later_ns` later. Both share both nodes at the same time, yet their rails are never busy together
// more than chance makes them: two jobs, each with its own group and step. Offline and streaming alike.
Input two_tenants_on_shared_servers(uint64_t later_ns = 40'000'000) {
  Input in = job_c(), two = in;
  uint64_t f = UINT64_MAX;  // the copy is stretched from job_c's first transfer on
  for (const FlowEvent& e : in.events) f = std::min(f, e.first_ns);
  for (FlowEvent e : in.events) {
    auto move = [](std::string& ip) { ip.replace(0, 4, "12.0"); };  // 11.0.r.1 -> 12.0.r.1
    move(e.src);
    move(e.dst);
    e.first_ns = f + (e.first_ns - f) * 6 / 5 + later_ns;
    e.last_ns = f + (e.last_ns - f) * 6 / 5 + later_ns;
    two.events.push_back(e);
  }
  for (const auto& [ip, node] : in.addr_node) two.addr_node["12.0" + ip.substr(4)] = node;
  std::stable_sort(two.events.begin(), two.events.end(),
                   [](const FlowEvent& a, const FlowEvent& b) { return a.first_ns < b.first_ns; });
  return two;
}

TEST(ThirdPartyShapes, TwoTenantsSharingServers) {
  Result r = analyze(two_tenants_on_shared_servers());
  ASSERT_EQ(r.jobs.size(), 2u);
  expect_job_c(r.jobs[0], {"s0", "s1"}, 3);
  expect_job_c(r.jobs[1], {"s0", "s1"}, 3, 1.2 * static_cast<double>(kStep));
}

// Started in the same millisecond on the same servers (a simulator starts every job at 0): two jobs with
// two ids (each also hashes its own smallest address).
TEST(ThirdPartyShapes, TwoTenantsStartedTogether) {
  Result r = analyze(two_tenants_on_shared_servers(0));
  ASSERT_EQ(r.jobs.size(), 2u);
  EXPECT_NE(r.jobs[0].id, r.jobs[1].id);
  EXPECT_EQ(r.jobs[0].first_ns / 1000000, r.jobs[1].first_ns / 1000000);
  bool c_first = r.jobs[0].iterations.front().duration_ns < r.jobs[1].iterations.front().duration_ns;
  expect_job_c(r.jobs[c_first ? 0 : 1], {"s0", "s1"}, 3);
  expect_job_c(r.jobs[c_first ? 1 : 0], {"s0", "s1"}, 3, 1.2 * static_cast<double>(kStep));
}

// The daemon's streaming engine over the same records (40 ms apart, and started together): the same two
// jobs, with the offline analysis' ids.
TEST(ThirdPartyShapes, TwoTenantsSharingServersStreaming) {
  for (uint64_t later : {uint64_t{40'000'000}, uint64_t{0}}) {
    Input in = two_tenants_on_shared_servers(later);
    std::stable_sort(in.events.begin(), in.events.end(),
                     [](const FlowEvent& a, const FlowEvent& b) { return a.last_ns < b.last_ns; });
    StreamingAnalysis sa;
    sa.set_addr_nodes(in.addr_node);
    size_t i = 0;
    for (uint64_t t = 50'000'000; i < in.events.size(); t += 50'000'000) {
      while (i < in.events.size() && in.events[i].last_ns <= t) add_event(sa, in.events[i++]);
      sa.pass(t);
    }
    in.offline = false;
    in.now_ns = in.events.back().last_ns + 500'000'000;
    Result live = sa.pass(in.now_ns), off = analyze(in);
    ASSERT_EQ(live.jobs.size(), 2u) << later;
    ASSERT_EQ(off.jobs.size(), 2u) << later;
    std::vector<std::string> ids_live{live.jobs[0].id, live.jobs[1].id},
        ids_off{off.jobs[0].id, off.jobs[1].id};
    std::sort(ids_live.begin(), ids_live.end());
    std::sort(ids_off.begin(), ids_off.end());
    EXPECT_EQ(ids_live, ids_off) << later;
    EXPECT_NE(ids_live[0], ids_live[1]) << later;
    bool c_first = live.jobs[0].iterations.front().duration_ns < live.jobs[1].iterations.front().duration_ns;
    expect_job_c(live.jobs[c_first ? 0 : 1], {"s0", "s1"}, 3);
    expect_job_c(live.jobs[c_first ? 1 : 0], {"s0", "s1"}, 3, 1.2 * static_cast<double>(kStep));
  }
}

// A recording of three iterations' synchronisations: the job and its groups are recognised.
TEST(ThirdPartyShapes, ThreeObservedIterations) {
  Input in = job_c();
  std::erase_if(in.events, [](const FlowEvent& e) { return e.first_ns < kStep; });  // drops the first burst
  Result r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  expect_job_c(r.jobs[0], {"s0", "s1"}, 2);
}

// The daemon's streaming engine, fed the records in arrival order with a pass every 50 ms of traffic,
// reports what the offline analysis does.
TEST(ThirdPartyShapes, StreamingMatchesOffline) {
  Input in = job_c();
  std::stable_sort(in.events.begin(), in.events.end(),
                   [](const FlowEvent& a, const FlowEvent& b) { return a.last_ns < b.last_ns; });
  uint64_t now = in.events.back().last_ns + 500'000'000;
  StreamingAnalysis sa;
  sa.set_addr_nodes(in.addr_node);
  size_t i = 0;
  for (uint64_t t = 50'000'000; i < in.events.size(); t += 50'000'000) {
    while (i < in.events.size() && in.events[i].last_ns <= t) add_event(sa, in.events[i++]);
    sa.pass(t);
  }
  Result live = sa.pass(now);
  in.offline = false;
  in.now_ns = now;
  Result off = analyze(in);
  ASSERT_EQ(live.jobs.size(), 1u);
  ASSERT_EQ(off.jobs.size(), 1u);
  const Job &a = live.jobs[0], &b = off.jobs[0];
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.parallelism.dp_groups, b.parallelism.dp_groups);
  EXPECT_EQ(a.parallelism.tp_hint, b.parallelism.tp_hint);
  expect_job_c(a, {"s0", "s1"}, 3);
  for (size_t k = 0; k < a.iterations.size(); ++k) EXPECT_EQ(a.iterations[k].end_ns, b.iterations[k].end_ns);
}

// Each message on its own QP goes silent after it: with a window shorter than the job, the first messages'
// connections are past it while the job still runs. The engine keeps a young job's connections while the job
// is active (expire()), so the job keeps its first iterations; once the whole job has been silent for the
// window it leaves the analysis at once, never as a fragment.
TEST(ThirdPartyShapes, AYoungJobKeepsItsConnectionsWhileActive) {
  Input in = job_c();
  std::stable_sort(in.events.begin(), in.events.end(),
                   [](const FlowEvent& a, const FlowEvent& b) { return a.last_ns < b.last_ns; });
  StreamingAnalysis::Limits lim;
  lim.window_ns = 500'000'000;  // job_c's records span 830 ms, its steps 275 ms
  StreamingAnalysis sa(lim);
  sa.set_addr_nodes(in.addr_node);
  size_t i = 0;
  uint64_t t = 50'000'000;
  for (; i < in.events.size(); t += 50'000'000) {
    while (i < in.events.size() && in.events[i].last_ns <= t) add_event(sa, in.events[i++]);
    Result r = sa.pass(t);
    for (const Job& j : r.jobs) EXPECT_EQ(j.nodes, (std::vector<std::string>{"s0", "s1"}));
  }
  Result live = sa.pass(t);
  ASSERT_EQ(live.jobs.size(), 1u);
  expect_job_c(live.jobs[0], {"s0", "s1"}, 3);
  EXPECT_TRUE(sa.pass(in.events.back().last_ns + lim.window_ns + 1).jobs.empty());
  EXPECT_EQ(sa.stats().conns, 0u);
}

// Megatron's distributed optimizer steps between the reduce-scatter and the all-gather: the two halves of
// each synchronisation 20 ms apart (the all-gather rows, the second message of each pair per iteration,
// moved later). Still one iteration per synchronisation pair, with the same step.
TEST(ThirdPartyShapes, ReduceScatterAndAllGatherApart) {
  Input in = job_c();
  for (FlowEvent& e : in.events)
    if (e.bytes < 100'000'000) {  // the all-gather messages (60.8 MB; the reduce-scatter ones are 121.6 MB)
      e.first_ns += 20'000'000;
      e.last_ns += 20'000'000;
    }
  Result r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  expect_job_c(r.jobs[0], {"s0", "s1"}, 3);
}
