// The volume drift of an edge (edge_drift.cpp) on transfer sequences shaped like the two kinds of two-way
// edge: a pipeline (each micro-batch's activation downstream, its gradient of the same size back after the
// downstream stage's compute), seen through windows that cut iterations anywhere; and an exchange that
// sends more one way every iteration (OpenMPI's two-rank reduce-scatter: a reduce, a smaller scatter back).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "stages.hpp"

using namespace netprism::analysis;

namespace {

constexpr uint64_t kMs = 1'000'000;

struct Traffic {
  std::vector<Xfer> xs;
  std::vector<const Xfer*> view(uint64_t from, uint64_t to) const {  // transfers wholly inside [from, to)
    std::vector<const Xfer*> out;
    for (const Xfer& x : xs)
      if (x.t0 >= from && x.t1 < to) out.push_back(&x);
    return out;
  }
  void add(uint32_t src, uint64_t t0, uint64_t bytes) {
    xs.push_back({src, 1 - src, 0, 0, t0, t0 + kMs, bytes});
  }
};

// GPipe over two stages (node 0 upstream): M activations of 1 MB 20 ms apart, then M gradients back, one
// iteration every 500 ms.
Traffic pipeline(int iters, int m) {
  Traffic e;
  for (int i = 0; i < iters; ++i) {
    const uint64_t t = static_cast<uint64_t>(i) * 500 * kMs;
    for (int k = 0; k < m; ++k) e.add(0, t + static_cast<uint64_t>(k) * 20 * kMs, 1'000'000);
    for (int k = 0; k < m; ++k) e.add(1, t + 200 * kMs + static_cast<uint64_t>(k) * 20 * kMs, 1'000'000);
  }
  return e;
}

// A reduce of 2 MB from node 1, then a scatter of 1 MB back and an all-gather of 1 MB each way, per unit.
Traffic reduce_scatter(int iters) {
  Traffic e;
  for (int i = 0; i < iters; ++i) {
    const uint64_t t = static_cast<uint64_t>(i) * 500 * kMs;
    for (int u = 0; u < 4; ++u) {
      const uint64_t s = t + static_cast<uint64_t>(u) * 100 * kMs;
      e.add(1, s, 2'000'000);
      e.add(0, s + 10 * kMs, 1'000'000);
      e.add(0, s + 20 * kMs, 1'000'000);
      e.add(1, s + 20 * kMs, 1'000'000);
    }
  }
  return e;
}

// The statistic over a window's transfers and their episodes, as parallelism.cpp calls it.
double drift(const std::vector<const Xfer*>& xs, uint32_t u) {
  return drift_share(xs, episodes_of(xs), u);
}
bool drifts(const std::vector<const Xfer*>& xs, uint32_t u) {
  return volume_drifts(xs, episodes_of(xs), u);
}

}  // namespace

TEST(EdgeDrift, APipelineDoesNotDriftWhereverTheWindowCutsItsIterations) {
  const Traffic e = pipeline(12, 4);
  EXPECT_LT(drift(e.view(0, UINT64_MAX), 0), 0.01);
  // Windows of 3 to 6 iterations starting and ending mid-iteration, with activations in flight at either end.
  for (uint64_t from = 0; from < 2500 * kMs; from += 70 * kMs)
    for (uint64_t len = 1500; len <= 3000; len += 500) {
      const auto v = e.view(from, from + len * kMs);
      EXPECT_LT(drift(v, 0), 0.06) << "window from " << from / kMs << " ms, " << len << " ms";
      EXPECT_FALSE(drifts(v, 1));
    }
}

TEST(EdgeDrift, AnExchangeThatSendsMoreOneWayDriftsByItsRatio) {
  const Traffic e = reduce_scatter(12);
  // 3 MB against 2 MB per unit: (r - 1) / (r + 1) = 0.2, from either end.
  EXPECT_NEAR(drift(e.view(0, UINT64_MAX), 1), 0.2, 0.02);
  EXPECT_NEAR(drift(e.view(0, UINT64_MAX), 0), 0.2, 0.02);
  for (uint64_t from = 0; from < 2500 * kMs; from += 70 * kMs)
    EXPECT_TRUE(drifts(e.view(from, from + 1500 * kMs), 1)) << "window from " << from / kMs << " ms";
}

TEST(EdgeDrift, TooFewEpisodesSayNothing) {
  Traffic e;
  e.add(0, 0, 1'000'000);
  EXPECT_EQ(drift(e.view(0, UINT64_MAX), 0), 0);
  EXPECT_EQ(drift({}, 0), 0);
}
