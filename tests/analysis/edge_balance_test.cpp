// The causality balance of an edge (edge_balance.cpp) on transfer sequences shaped like the two kinds of
// two-way edge: a pipeline (each micro-batch's activation downstream, its gradient of the same size back
// after the downstream stage's compute) and a DP pair whose second member is late for every all-reduce (the
// early member's half leaves at once, the late one sends its half and the all-gather's, the early one then
// its all-gather half). Both hold one orientation below zero for a share of the time; only the pipeline's
// never rises above it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "stages.hpp"

using namespace netprism::analysis;

namespace {

constexpr uint64_t kMs = 1'000'000;

struct Traffic {
  std::vector<Xfer> xs;
  void add(uint32_t src, uint64_t t0, uint64_t dur, uint64_t bytes) {
    xs.push_back({src, 1 - src, 0, 0, t0, t0 + dur, bytes});
  }
  EdgeBalance balance(uint32_t u) const {
    std::vector<const Xfer*> v;
    for (const Xfer& x : xs) v.push_back(&x);
    std::sort(v.begin(), v.end(), [](const Xfer* a, const Xfer* b) { return a->t0 < b->t0; });
    const std::vector<Episode> ep = episodes_of(v);
    return edge_balance(v, ep, u, 0.5 * 1'000'000);
  }
};

// 1F1B-like over two stages (node 0 upstream): 4 micro-batches of 1 MB, the gradient 40 ms after its
// activation arrived, one iteration every 500 ms.
Traffic pipeline(int iters) {
  Traffic e;
  for (int i = 0; i < iters; ++i) {
    const uint64_t t = static_cast<uint64_t>(i) * 500 * kMs;
    for (int k = 0; k < 4; ++k) {
      const uint64_t a = t + static_cast<uint64_t>(k) * 60 * kMs;
      e.add(0, a, 2 * kMs, 1'000'000);
      e.add(1, a + 42 * kMs, 2 * kMs, 1'000'000);
    }
  }
  return e;
}

// A 2 MB ring all-reduce between two members, node 1 late by 300 ms every iteration (one-second steps):
// node 0's reduce-scatter half, then node 1's two halves back to back, then node 0's all-gather half.
Traffic late_member(int iters) {
  Traffic e;
  for (int i = 0; i < iters; ++i) {
    const uint64_t t = static_cast<uint64_t>(i) * 1000 * kMs;
    e.add(0, t, 5 * kMs, 1'000'000);
    e.add(1, t + 300 * kMs, 5 * kMs, 1'000'000);
    e.add(1, t + 305 * kMs, 5 * kMs, 1'000'000);
    e.add(0, t + 306 * kMs, 5 * kMs, 1'000'000);
  }
  return e;
}

}  // namespace

TEST(EdgeBalance, APipelinesReverseFallsEveryMicroBatchAndNeverRises) {
  const Traffic p = pipeline(10);
  const EdgeBalance up = p.balance(0), reverse = p.balance(1);
  EXPECT_EQ(up.negative_share, 0.0) << "a gradient ends after its activation started";
  EXPECT_EQ(up.below, 0u);
  EXPECT_GT(reverse.negative_share, 0.2);
  EXPECT_GE(reverse.below, 10u);
  EXPECT_EQ(reverse.above, 0u) << "the downstream stage never sends more than it received";
}

TEST(EdgeBalance, ALateDpMemberRisesAsOftenAsItFalls) {
  const Traffic d = late_member(10);
  const EdgeBalance late = d.balance(1);
  EXPECT_GT(late.negative_share, 0.2) << "read by its share alone, a pipeline";
  EXPECT_GE(late.below, 9u);
  EXPECT_GE(late.above, late.below) << "the late member sends its own half, more than it was owed";
}

// Transfers made from counters sampled every 10 ms: each end of a transfer is placed to within an interval.
// A pipeline's gradient placed 8 ms before its activation's placed end rises the reverse orientation above
// zero, from zero; a late DP member's reduce-scatter and all-gather halves, sent back to back, take it from
// below (the early member's half outstanding) to above in one transfer.
TEST(EdgeBalance, OnASamplingGridOnlyALateDpMemberCrossesZeroInOneTransfer) {
  Traffic p, d;
  for (int i = 0; i < 10; ++i) {
    const uint64_t t = static_cast<uint64_t>(i) * 1000 * kMs;
    for (int k = 0; k < 4; ++k) {
      const uint64_t a = t + static_cast<uint64_t>(k) * 100 * kMs;
      p.add(0, a, 20 * kMs, 1'000'000);
      p.add(1, a + 12 * kMs, 20 * kMs, 1'000'000);
    }
    d.add(0, t, 20 * kMs, 1'000'000);
    d.add(1, t + 300 * kMs, 30 * kMs, 2'000'000);
    d.add(0, t + 315 * kMs, 20 * kMs, 1'000'000);
  }
  const EdgeBalance reverse = p.balance(1), late = d.balance(1);
  EXPECT_GE(reverse.above, 10u) << "the grid misorders every micro-batch";
  EXPECT_EQ(reverse.crossing_above, 0u);
  EXPECT_GE(late.below, 9u);
  EXPECT_GE(late.crossing_above, late.below);
}
