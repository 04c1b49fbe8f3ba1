// RecordRing (aggregator/analysis/record_ring.hpp): the streaming engine's per-flow transfer list, checked
// against a std::deque doing the same pushes, drops and filters.
#include "record_ring.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <random>

using netprism::analysis::RecordRing;

namespace {

void expect_same(const RecordRing<uint64_t>& r, const std::deque<uint64_t>& d) {
  ASSERT_EQ(r.size(), d.size());
  for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(r[i], d[i]) << "at " << i;
}

}  // namespace

TEST(RecordRing, StartsEmptyAndHoldsNothing) {
  RecordRing<uint64_t> r;
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.capacity(), 0u);
  EXPECT_EQ(r.next_slot(), nullptr);
  r.pop_front(0);
  EXPECT_EQ(r.size(), 0u);
}

TEST(RecordRing, WrapsAroundInOrder) {
  RecordRing<uint64_t> r;
  std::deque<uint64_t> d;
  for (uint64_t i = 0; i < 6; ++i) r.push_back(i), d.push_back(i);  // capacity 8
  r.pop_front(5), d.erase(d.begin(), d.begin() + 5);
  for (uint64_t i = 6; i < 12; ++i) r.push_back(i), d.push_back(i);  // wraps past the end of the buffer
  EXPECT_EQ(r.capacity(), 8u);
  expect_same(r, d);
  r.push_back(12), d.push_back(12);
  r.push_back(13), d.push_back(13);  // full at 8: grows, unwrapping
  r.push_back(14), d.push_back(14);
  EXPECT_EQ(r.capacity(), 16u);
  expect_same(r, d);
}

TEST(RecordRing, RoomStaysWithinTwiceTheLiveRecordsOnceSteady) {
  // A flow's steady tail: k transfers in, k out, every pass. The buffer settles at the next power of two
  // above the peak and does not reallocate pass after pass.
  RecordRing<uint64_t> r;
  uint64_t next = 0;
  for (int pass = 0; pass < 200; ++pass) {
    for (int i = 0; i < 37; ++i) r.push_back(next++);
    if (r.size() > 300) r.pop_front(r.size() - 300);
  }
  EXPECT_EQ(r.size(), 300u);
  EXPECT_EQ(r.capacity(), 512u);  // the peak is 337
  EXPECT_EQ(r[0], next - 300);
}

TEST(RecordRing, ShrinksWhenAQuarterFullAndNotBefore) {
  RecordRing<uint64_t> r;
  for (uint64_t i = 0; i < 64; ++i) r.push_back(i);
  EXPECT_EQ(r.capacity(), 64u);
  r.pop_front(47);  // 17 left: over a quarter
  EXPECT_EQ(r.capacity(), 64u);
  r.pop_front(1);  // 16: a quarter -> half
  EXPECT_EQ(r.capacity(), 32u);
  EXPECT_EQ(r[0], 48u);
  EXPECT_EQ(r[15], 63u);
  r.pop_front(16);
  EXPECT_TRUE(r.empty());
  r.push_back(7);
  EXPECT_EQ(r[0], 7u);
}

TEST(RecordRing, RetainIfKeepsOrderAndCountsTheRest) {
  RecordRing<uint64_t> r;
  std::deque<uint64_t> d;
  for (uint64_t i = 0; i < 40; ++i) r.push_back(i);
  r.pop_front(30);  // head inside the buffer, records wrapped
  for (uint64_t i = 40; i < 60; ++i) r.push_back(i);
  for (uint64_t i = 30; i < 60; ++i)
    if (i % 3 == 0) d.push_back(i);
  EXPECT_EQ(r.retain_if([](uint64_t x) { return x % 3 == 0; }), 20u);
  expect_same(r, d);
  EXPECT_EQ(r.retain_if([](uint64_t) { return false; }), 10u);
  EXPECT_TRUE(r.empty());
}

TEST(RecordRing, MatchesADequeUnderRandomUse) {
  std::mt19937_64 rng(7);
  RecordRing<uint64_t> r;
  std::deque<uint64_t> d;
  uint64_t next = 0;
  for (int step = 0; step < 20000; ++step) {
    const auto op = rng() % 10;
    if (op < 6) {
      r.push_back(next), d.push_back(next), ++next;
    } else if (op < 9) {
      const size_t k = d.empty() ? 0 : rng() % (d.size() + 1);
      r.pop_front(k), d.erase(d.begin(), d.begin() + static_cast<long>(k));
    } else {
      const uint64_t m = 2 + rng() % 5;
      r.retain_if([m](uint64_t x) { return x % m != 0; });
      std::erase_if(d, [m](uint64_t x) { return x % m == 0; });
    }
    ASSERT_LE(r.size(), r.capacity());
    if (r.capacity() > 4) {
      ASSERT_GT(4 * r.size(), r.capacity()) << "a ring left over four times too large";
    }
    if (step % 97 == 0) expect_same(r, d);
  }
  expect_same(r, d);
}
