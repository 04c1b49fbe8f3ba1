// Stage 3: DP groups, pipeline stages in order, for shapes beyond the acceptance examples.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "netprism/flowlet.h"
#include "synth.hpp"

using namespace netprism::analysis;

namespace {
struct Shape {
  int dp, pp, m;
  bool gpipe;
};
class AnalysisParallelism : public ::testing::TestWithParam<Shape> {};
}  // namespace

TEST_P(AnalysisParallelism, RecoversGroupsAndStageOrder) {
  Shape sh = GetParam();
  synth::Spec s;
  s.dp = sh.dp;
  s.pp = sh.pp;
  s.micro_batches = sh.m;
  s.gpipe = sh.gpipe;
  Input in;
  synth::generate(s, in);
  auto r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  const auto& p = r.jobs[0].parallelism;
  EXPECT_EQ(p.dp, sh.dp);
  EXPECT_EQ(p.pp, sh.pp);
  std::vector<std::vector<std::string>> stages;
  for (int st = 0; st < sh.pp; ++st) {
    std::vector<std::string> g;
    for (int d = 0; d < sh.dp; ++d) g.push_back(synth::node_name(s, st * sh.dp + d));
    std::sort(g.begin(), g.end());
    stages.push_back(g);
  }
  EXPECT_EQ(p.stages, stages);
  if (sh.dp > 1)
    EXPECT_EQ(p.dp_groups, stages);
  else
    EXPECT_TRUE(p.dp_groups.empty());
}

INSTANTIATE_TEST_SUITE_P(Shapes, AnalysisParallelism,
                         ::testing::Values(Shape{4, 1, 4, false}, Shape{1, 4, 4, false}, Shape{1, 4, 8, true},
                                           Shape{2, 2, 4, false}, Shape{2, 2, 4, true}, Shape{3, 2, 6, false},
                                           Shape{2, 4, 8, false}, Shape{4, 3, 2, true}, Shape{8, 2, 4, false},
                                           Shape{1, 2, 2, false}, Shape{2, 8, 8, false}));

// Extra: expert parallelism. A DP4 x PP2 job whose stage peers also exchange tokens all-to-all inside EP
// groups of two or of four: dp and pp stay exact, ep is the exchange's group size; a plain ring reports none.
TEST(AnalysisParallelism, ExpertParallelAllToAllAmongDpPeers) {
  for (int ep : {2, 4}) {
    synth::Spec s;
    s.dp = 4;
    s.pp = 2;
    Input in;
    synth::generate(s, in);
    // Tokens dispatched after every forward: each stage node sends to every other member of its EP group
    // over its own connection, a few times per iteration; small next to the gradients (a few percent, as
    // in netprism-sim): a heavy exchange on ring edges is a limit of the DP/PP edge roles (not handled).
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (const auto& e : in.events) {
      t0 = std::min(t0, e.first_ns);
      t1 = std::max(t1, e.last_ns);
    }
    std::vector<FlowEvent> extra;
    for (int st = 0; st < s.pp; ++st)
      for (int a = 0; a < s.dp; ++a)
        for (int b = 0; b < s.dp; ++b) {
          if (a == b || a / ep != b / ep) continue;
          int u = st * s.dp + a, v = st * s.dp + b;
          for (uint64_t t = t0 + 7'000'000; t + 1'000'000 < t1; t += 100'000'000) {
            FlowEvent e;
            e.observer = synth::node_name(s, u);
            e.src = synth::node_addr(s, u);
            e.dst = synth::node_addr(s, v);
            e.src_port = static_cast<uint16_t>(50000 + u * 16 + v);
            e.dst_port = 29500;
            e.dir = NP_DIR_EGRESS;
            e.first_ns = t;
            e.last_ns = t + 200'000;
            e.bytes = e.payload_bytes = 16 * 1024;
            e.packets = 12;
            extra.push_back(e);
          }
        }
    in.events.insert(in.events.end(), extra.begin(), extra.end());
    auto r = analyze(in);
    ASSERT_EQ(r.jobs.size(), 1u);
    const auto& p = r.jobs[0].parallelism;
    EXPECT_EQ(p.dp, 4);
    EXPECT_EQ(p.pp, 2);
    EXPECT_EQ(p.ep, ep);
  }
  synth::Spec s;
  s.dp = 4;
  s.pp = 2;
  Input in;
  synth::generate(s, in);
  EXPECT_EQ(analyze(in).jobs.at(0).parallelism.ep, 0);
}

// Stage inference as one structure: a DP x PP job where one DP pair reads more like a pipeline edge than a
// real pipeline edge does, taken edge by edge. Stage 0's second member waits for a straggling peer in every
// synchronisation, so that pair's exchange is one-sided for almost a third of each step (the member that is
// ready first sends its first chunk, the peer answers when its compute is done), as on a loaded host with a
// 1.3x straggler; and the second pipeline's last stage answers each activation quickly, so its causality
// evidence is only a little above the threshold. Removing the weakest pipeline edge first (the former greedy
// repair) gave the stages {n0 n3} {n1 n2}, as one loaded demo run did. The structure must come out as
// stages {n0 n1} -> {n2 n3} with those DP groups: relabelling the one-sided pair is the cheapest way to a
// DP x PP structure.
TEST(AnalysisParallelism, OneSidedDpPairDoesNotBreakTheStructure) {
  Input in;
  // Fixed tables rather than "n" + to_string(i): GCC 12 warns (-Wrestrict, a known false positive) on that.
  const std::array<std::string, 4> names = {"n0", "n1", "n2", "n3"};
  const std::array<std::string, 4> addrs = {"10.9.0.1", "10.9.0.2", "10.9.0.3", "10.9.0.4"};
  auto name = [&](int i) { return names[static_cast<size_t>(i)]; };
  auto addr = [&](int i) { return addrs[static_cast<size_t>(i)]; };
  for (int i = 0; i < 4; ++i) in.addr_node[addr(i)] = name(i);
  const uint64_t t0 = 1'700'000'000'000'000'000ull;
  auto add = [&](int u, int v, double at_ms, double dur_ms, uint64_t bytes) {
    FlowEvent e;
    e.observer = name(u);
    e.src = addr(u);
    e.dst = addr(v);
    // One connection per node pair, the lower node the connecting side.
    e.src_port = static_cast<uint16_t>(u < v ? 40000 + u * 8 + v : 29500);
    e.dst_port = static_cast<uint16_t>(u < v ? 29500 : 40000 + v * 8 + u);
    e.dir = NP_DIR_EGRESS;
    e.first_ns = t0 + static_cast<uint64_t>(at_ms * 1e6);
    e.last_ns = e.first_ns + static_cast<uint64_t>(dur_ms * 1e6);
    e.bytes = e.payload_bytes = bytes;
    e.packets = bytes / 1448 + 1;
    e.proto = NP_PROTO_TCP;
    in.events.push_back(e);
  };
  const double T = 700, wait = 210;  // step and the one-sided wait (30 % of the step)
  const uint64_t act = 256 * 1024, chunk = 2 << 20;
  for (int it = 0; it < 14; ++it) {
    double b = it * T;
    for (int d = 0; d < 2; ++d) {  // pipelines n0 -> n2 and n1 -> n3, GPipe with 4 micro-batches
      for (int m = 0; m < 4; ++m) add(d, 2 + d, b + 30 * (m + 1), 1, act);
      for (int m = 0; m < 4; ++m) add(2 + d, d, d == 0 ? b + 210 + 60 * m : b + 30 * (m + 1) + 45, 1, act);
    }
    // Stage 1 synchronises first (a balanced exchange), stage 0 last: n0 is ready `wait` ms before n1.
    add(2, 3, b + 420, 2, chunk);
    add(3, 2, b + 420.2, 2, chunk);
    add(2, 3, b + 422.5, 2, chunk);
    add(3, 2, b + 422.7, 2, chunk);
    add(0, 1, b + 470, 2, chunk);
    add(1, 0, b + 470 + wait, 2, chunk);
    add(0, 1, b + 472.5 + wait, 2, chunk);
    add(1, 0, b + 472.7 + wait, 2, chunk);
  }
  in.offline = true;
  auto r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  const auto& p = r.jobs[0].parallelism;
  EXPECT_EQ(p.dp, 2);
  EXPECT_EQ(p.pp, 2);
  std::vector<std::vector<std::string>> stages = {{"n0", "n1"}, {"n2", "n3"}};
  EXPECT_EQ(p.stages, stages);
  EXPECT_EQ(p.dp_groups, stages);
  EXPECT_GE(r.jobs[0].iterations.size(), 10u);
}

// A two-node DP job whose second member is late for every all-reduce from iteration 3 on (as soft-RoCE DP2
// with a 300 ms straggler in 0.95 s steps): the early member's half waits on the edge for 29 % of each step,
// which alone reads as a pipeline (one edge, no structure to outvote it). The late member then sends its own
// half and the all-gather's, more than it was owed, which a pipeline's downstream stage never does.
TEST(AnalysisParallelism, ATwoNodeDpJobWithALateMemberIsNotAPipeline) {
  Input in;
  in.addr_node["10.9.1.1"] = "n0";
  in.addr_node["10.9.1.2"] = "n1";
  const uint64_t t0 = 1'700'000'000'000'000'000ull;
  auto add = [&](int u, double at_ms, uint64_t bytes) {
    FlowEvent e;
    e.observer = u == 0 ? "n0" : "n1";
    e.src = u == 0 ? "10.9.1.1" : "10.9.1.2";
    e.dst = u == 0 ? "10.9.1.2" : "10.9.1.1";
    e.src_port = static_cast<uint16_t>(u == 0 ? 40000 : 29500);
    e.dst_port = static_cast<uint16_t>(u == 0 ? 29500 : 40000);
    e.dir = NP_DIR_EGRESS;
    e.first_ns = t0 + static_cast<uint64_t>(at_ms * 1e6);
    e.last_ns = e.first_ns + 5'000'000;
    e.bytes = e.payload_bytes = bytes;
    e.packets = bytes / 1448 + 1;
    e.proto = NP_PROTO_TCP;
    in.events.push_back(e);
  };
  for (int it = 0; it < 14; ++it) {
    const double b = it * 1000.0 + (it > 3 ? (it - 3) * 400.0 : 0), late = it >= 3 ? 400 : 2;
    add(0, b + 600, 1 << 20);
    add(1, b + 600 + late, 1 << 20);
    add(1, b + 605 + late, 1 << 20);
    add(0, b + 606 + late, 1 << 20);
  }
  in.offline = true;
  auto r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  EXPECT_EQ(r.jobs[0].parallelism.dp, 2);
  EXPECT_EQ(r.jobs[0].parallelism.pp, 1);
  EXPECT_GE(r.jobs[0].iterations.size(), 12u);
}
