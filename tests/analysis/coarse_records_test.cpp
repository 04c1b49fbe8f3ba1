// Coarse records (coarse_records.cpp): which records span quiet gaps, and the order of two nodes'
// synchronisations. The end-to-end case (real exporters' IPFIX of a DP 2 x PP 2 job, read as 2 x 2 with its
// stage order) is tests/aggregator/flow_capture_samples.py.
#include <gtest/gtest.h>

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
  EXPECT_FALSE(coarse(rec(1, 0)));                       // one packet (an sFlow sample, a probe flowlet)
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
