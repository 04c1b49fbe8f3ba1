// Stage 3: DP groups, pipeline stages in order, for shapes beyond the acceptance examples.
#include <gtest/gtest.h>

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
