// Coarse records (coarse_records.cpp): which records span quiet gaps, and the order of two nodes'
// synchronisations. The end-to-end case (real exporters' IPFIX of a DP 2 x PP 2 job, read as 2 x 2 with its
// stage order) is tests/aggregator/flow_capture_samples.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "stages.hpp"

using namespace netprism::analysis;

namespace {
Xfer rec(uint32_t packets, uint64_t duration_ns) {
  Xfer x;
  x.packets = packets;
  x.t0 = 1'000'000'000;
  x.t1 = x.t0 + duration_ns;
  x.bytes = 1000;
  return x;
}
}  // namespace

TEST(CoarseRecords, ARecordIsCoarseWhenItsPacketsAreSpacedWiderThanAnEpisodeGap) {
  EXPECT_TRUE(coarse(rec(2, kEpisodeGapNs + 1)));        // two packets a quiet gap apart
  EXPECT_FALSE(coarse(rec(2, kEpisodeGapNs)));           // exactly the gap: still one episode
  EXPECT_TRUE(coarse(rec(8, 1'550'000'000)));            // nfprobe's pipeline records: 1.5 s, 8 packets
  EXPECT_FALSE(coarse(rec(34, 15'000'000)));             // its DP records: 1 MB, 34 packets in 15 ms
  EXPECT_FALSE(coarse(rec(1, 0)));                       // one packet (a probe flowlet)
  EXPECT_TRUE(coarse(rec(2, 1'000'000'000)));            // an sFlow sample in its 1 s flush window (2)
  EXPECT_FALSE(coarse(rec(0, 1'000'000'000)));           // packets unknown (CSV): not judged coarse
  EXPECT_TRUE(coarse(rec(UINT32_MAX, UINT64_MAX / 2)));  // no overflow at the extremes
}

TEST(CoarseRecords, SyncOrderSaysWhoseSynchronisationsFollowTheOthersClosely) {
  // v (downstream) synchronises 50 ms before u in each 1 s step: u upstream, strongly.
  std::vector<uint64_t> u, v;
  for (uint64_t k = 1; k <= 10; ++k) {
    v.push_back(k * 1'000'000'000 - 50'000'000);
    u.push_back(k * 1'000'000'000);
  }
  double w = sync_order(u, v);
  EXPECT_NEAR(w, (950.0 - 50.0) / 1000.0, 1e-9);
  EXPECT_NEAR(sync_order(v, u), -w, 1e-9);
  EXPECT_EQ(sync_order(u, {}), 0.0);  // unknown without the other's synchronisations
  EXPECT_EQ(sync_order({}, v), 0.0);
}

TEST(CoarseRecords, HeavyEpisodesAreTheSynchronisations) {
  // Node 0 and 1: a 1 MB exchange every second, and an 8 KB message between them half a second later.
  JobSlice job;
  for (uint64_t k = 0; k < 3; ++k) {
    uint64_t t = (k + 1) * 1'000'000'000;
    job.xfers.push_back({0, 1, 0, 30, t, t + 10'000'000, 1'000'000});
    job.xfers.push_back({1, 0, 0, 30, t, t + 12'000'000, 1'000'000});
    job.xfers.push_back({0, 1, 0, 2, t + 500'000'000, t + 500'000'000, 8'000});
    // A coarse record over the whole second: not a synchronisation of anyone's.
    job.xfers.push_back({0, 1, 1, 6, t + 1, t + 900'000'000, 900'000'000});
  }
  auto ends = heavy_episode_ends(job, 2);
  std::vector<uint64_t> want{1'012'000'000, 2'012'000'000, 3'012'000'000};
  EXPECT_EQ(ends[0], want);
  EXPECT_EQ(ends[1], want);
}

// 1:N samples, each spanning its agent's 1 s flush window: contiguous windows, every record coarse. Nodes
// 0 and 1 synchronise 2 MB in every fifth flush, node 1's one flush after node 0's every other time; between
// them, 20 KB of pipeline traffic in every flush. The synchronisations are the heavy flushes, as points.
TEST(CoarseRecords, SampledNodesSynchroniseAtTheirHeavyFlushes) {
  JobSlice job;
  constexpr uint64_t s = 1'000'000'000;
  std::vector<uint64_t> want0, want1;
  for (uint64_t f = 1; f <= 40; ++f) {
    bool sync = f % 5 == 0;
    uint64_t late = sync && f % 10 == 0 ? 1 : 0;
    job.xfers.push_back({0, 1, 0, 2, (f - 1) * s, f * s, sync ? 2'000'000u : 20'000u});
    if (sync) {
      job.xfers.push_back({1, 0, 0, 2, (f + late - 1) * s, (f + late) * s, 2'000'000});
      want0.push_back(f * s);
      want1.push_back((f + late) * s);
    }
  }
  std::sort(job.xfers.begin(), job.xfers.end(), [](const Xfer& a, const Xfer& b) { return a.t0 < b.t0; });
  auto ends = heavy_episode_ends(job, 2);
  // Node 0's heavy flushes are its own syncs and node 1's late ones (it receives them); node 1's the same.
  std::vector<uint64_t> all = want0;
  all.insert(all.end(), want1.begin(), want1.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(ends[0], all);
  EXPECT_EQ(ends[1], all);
}

// The estimated step of a coarse timeline: ends quantised to 1 s flushes of a 4.52 s step, one end missing
// and one doubled, read within 1 %; the median of the durations (4 or 5 s) cannot be.
TEST(CoarseRecords, EstimatedStepIsTheSlopeOfTheEndsOverTheirNumbers) {
  constexpr double step = 4.52e9;
  std::vector<Iteration> its;
  for (int k = 0; k < 12; ++k) {
    if (k == 5) continue;  // a synchronisation no sample caught
    Iteration it;
    it.end_ns = static_cast<uint64_t>(std::ceil((100e9 + k * step) / 1e9) * 1e9);
    its.push_back(it);
    if (k == 8) its.push_back(it);  // two groups' ends read as two iterations
  }
  EXPECT_NEAR(coarse_step_ns(its, 1e9, 5e9), step, 0.01 * step);
  EXPECT_EQ(coarse_step_ns(its, 0, 4.5e9), 4.5e9);  // fine records: the measured step stands
}
