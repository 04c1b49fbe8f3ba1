// Shared statistics (stats.hpp) and the timeline's merge of synchronisation ends (timeline_steps.hpp).
#include <gtest/gtest.h>

#include <cmath>

#include "timeline_steps.hpp"

using namespace netprism::analysis;

TEST(AnalysisStats, MedianOfOddEvenAndNone) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({5}), 5.0);
  EXPECT_EQ(median({9, 1, 5}), 5.0);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);  // the mean of the two middle values
}

TEST(AnalysisStats, MadAndRobustSigmaIgnoreOneOutlier) {
  std::vector<double> v{10, 11, 9, 10, 1000};
  double med = median(v);
  EXPECT_EQ(med, 10.0);
  EXPECT_EQ(mad(v, med), 1.0);  // deviations 0, 1, 1, 0, 990
  EXPECT_DOUBLE_EQ(robust_sigma(v, med), kMadToSigma);
}

TEST(AnalysisStats, TypicalSizeLeavesOutControlMessages) {
  // Three 1 MB messages among many 100-byte notifications: the notifications are under a tenth of the top.
  std::vector<double> sizes(10, 100);
  sizes.insert(sizes.end(), {1e6, 1.1e6, 0.9e6});
  EXPECT_EQ(typical_size(sizes), 1e6);
  EXPECT_EQ(typical_size({}), 0.0);
}

TEST(AnalysisStats, SpacingsOfTimes) {
  EXPECT_TRUE(spacings({}).empty());
  EXPECT_TRUE(spacings({7}).empty());
  EXPECT_EQ(spacings({10, 15, 35}), (std::vector<double>{5, 20}));
}

// Ends closer than the limit to the previous kept end are one synchronisation: the later end is kept, and
// a chain of close ends collapses onto its last one.
TEST(AnalysisTimelineSteps, MergeCloseKeepsTheLaterEnd) {
  using timeline_steps::merge_close;
  EXPECT_EQ(merge_close({100, 130, 400, 420, 440, 900}, 50), (std::vector<uint64_t>{130, 440, 900}));
  EXPECT_EQ(merge_close({100, 200, 300}, 50), (std::vector<uint64_t>{100, 200, 300}));
  EXPECT_TRUE(merge_close({}, 50).empty());
}

// A synchronisation stalled into two episodes (no pipeline send of the group's members between their ends)
// is one; ends with a pipeline send between them stay apart; without any pipeline send in view every end is
// kept.
TEST(AnalysisTimelineSteps, MergeStalledNeedsNoPipelineSendBetween) {
  Structure s;
  // Nodes 0 and 1: DP group 0 of stage 0; node 2: stage 1.
  s.stage_of = {0, 0, 1};
  s.group_of = {0, 0, -1};
  s.dp_groups = {{0, 1}};
  JobSlice job;
  auto xfer = [](uint32_t src, uint32_t dst, uint64_t t0) { return Xfer{src, dst, 0, 1, t0, t0 + 5, 1000}; };
  job.xfers = {xfer(0, 1, 90), xfer(0, 2, 250), xfer(1, 0, 300), xfer(1, 2, 650)};
  // 100 -> 200: no send between (stalled, merged into 200); 200 -> 500: send at 250; 500 -> 600: none.
  EXPECT_EQ(timeline_steps::merge_stalled({100, 200, 500, 600}, job, s, 0),
            (std::vector<uint64_t>{200, 600}));
  JobSlice dp_only;
  dp_only.xfers = {xfer(0, 1, 90), xfer(1, 0, 300)};
  EXPECT_EQ(timeline_steps::merge_stalled({100, 200, 500}, dp_only, s, 0),
            (std::vector<uint64_t>{100, 200, 500}));
}
