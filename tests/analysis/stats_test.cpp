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

// The data a member receives after its group's senders were done (an emulated NIC's queue, a congested path)
// is its synchronisation's tail: a transfer that began before the group's end counts for that end, not for
// the next one (soft-RoCE: the last 71 KB of an all-reduce reached node0 40 ms after the senders' end, and
// the synchronisation was read as ending at an earlier piece, 72 ms early).
TEST(AnalysisTimelineSteps, MemberEndsKeepTheTailThatArrivesAfterTheSendersEnd) {
  Structure s;
  s.stage_of = {0, 0};
  s.group_of = {0, 0};
  s.dp_groups = {{0, 1}};
  const uint64_t ms = 1'000'000;
  auto xfer = [](uint32_t src, uint32_t dst, uint64_t t0, uint64_t t1) {
    return Xfer{src, dst, 0, 1, t0, t1, 65536};
  };
  JobSlice job;
  // Synchronisations ending (senders' views) at 1000 and 2000 ms.
  job.xfers = {xfer(0, 1, 950 * ms, 990 * ms), xfer(1, 0, 960 * ms, 1000 * ms),
               xfer(0, 1, 1950 * ms, 1990 * ms), xfer(1, 0, 1960 * ms, 2000 * ms)};
  // Node 1 received its part by 995 ms; node 0 got the first piece of its part by 970 ms, the rest from 980
  // to 1040 ms.
  job.arrivals = {xfer(0, 1, 955 * ms, 995 * ms), xfer(1, 0, 962 * ms, 970 * ms),
                  xfer(1, 0, 980 * ms, 1040 * ms), xfer(0, 1, 1952 * ms, 1992 * ms),
                  xfer(1, 0, 1962 * ms, 2002 * ms)};
  timeline_steps::Reference ref;
  ref.group = 0;
  ref.ends = {1000 * ms, 2000 * ms};
  ref.step = 1000.0 * ms;
  timeline_steps::GroupEnds ge{ref.ends, ref.ends};
  const auto ends = timeline_steps::member_ends(job, s, 0, ge, ref);
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends[0], (995 + 1040) * ms / 2);  // the median (two members: the mean) of 995 and 1040
  EXPECT_EQ(ends[1], (1992 + 2002) * ms / 2);
}
