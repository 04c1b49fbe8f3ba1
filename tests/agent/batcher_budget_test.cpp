#include <gtest/gtest.h>

#include "batcher.hpp"
#include "budget.hpp"

using namespace netprism;
using namespace netprism::agent;

TEST(Batcher, SealsByCount) {
  Batcher b("n", 9, {4, 100'000'000});
  Flowlet f{};
  for (int i = 0; i < 3; ++i) b.add(f, 1000);
  EXPECT_FALSE(b.due(1000));
  b.add(f, 1000);
  EXPECT_TRUE(b.full());
  EXPECT_TRUE(b.due(1000));
  Batch x = b.seal(77, {{"captured", 4}});
  EXPECT_EQ(x.flowlets.size(), 4u);
  EXPECT_EQ(x.epoch, 9u);
  EXPECT_EQ(x.seq, 0u);
  EXPECT_EQ(x.node, "n");
  EXPECT_EQ(x.sent_ns, 77u);
  EXPECT_EQ(x.counters.at("captured"), 4u);
  EXPECT_EQ(b.records(), 0u);
  b.add(f, 2000);
  EXPECT_EQ(b.seal(78, {}).seq, 1u);  // gap-free sequence per epoch
}

TEST(Batcher, SealsByTimeFromTheOldestRecord) {
  Batcher b("n", 1, {4096, 100'000'000});
  EXPECT_FALSE(b.due(5'000'000'000));  // empty: never due
  b.add(Flowlet{}, 1'000'000'000);
  b.add(RdmaPortBurst{}, 1'090'000'000);
  EXPECT_FALSE(b.due(1'099'999'999));
  EXPECT_TRUE(b.due(1'100'000'000));
  Batch x = b.seal(1, {});
  EXPECT_EQ(x.flowlets.size() + x.rdma_bursts.size(), 2u);
}

TEST(Budget, DegradesStepByStepAndRecovers) {
  BudgetOptions o;
  o.cpu_percent = 10;
  o.max_records_per_sec = 1000;
  Budget b(o);
  const uint64_t s = 1'000'000'000;
  EXPECT_FALSE(b.observe(s / 100, 10, s));  // 1 % CPU, 10 records/s
  EXPECT_FALSE(b.observe(s / 5, 10, s));    // 20 % CPU: one bad window is not enough
  EXPECT_TRUE(b.observe(s / 5, 10, s));     // two in a row: level 1
  EXPECT_EQ(b.level().level, 1);
  EXPECT_EQ(b.level().flush_multiplier, 4u);
  EXPECT_EQ(b.level().gap_multiplier, 1u);
  EXPECT_FALSE(b.observe(0, 5000, s));  // the record rate alone is over budget too
  EXPECT_TRUE(b.observe(0, 5000, s));
  EXPECT_EQ(b.level().level, 2);
  EXPECT_EQ(b.level().gap_multiplier, 4u);
  for (int i = 0; i < 4; ++i) b.observe(s, 0, s);
  EXPECT_EQ(b.level().level, Budget::kMaxLevel);  // never beyond the last stated level
  EXPECT_EQ(b.degrade_steps(), 3u);
  // Between half and the full budget: no change either way.
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(b.observe(s * 7 / 100, 700, s));
  for (int i = 0; i < 9; ++i) EXPECT_FALSE(b.observe(0, 0, s));
  EXPECT_TRUE(b.observe(0, 0, s));  // ten quiet windows: one step back
  EXPECT_EQ(b.level().level, 2);
  EXPECT_EQ(b.recover_steps(), 1u);
  EXPECT_GE(b.over_windows(), 7u);
}
