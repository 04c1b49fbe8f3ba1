// FlatIndex (aggregator/analysis/flat_index.hpp): the streaming engine's key -> record index.
#include "flat_index.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

using netprism::analysis::FlatIndex;
using netprism::analysis::hash_words;

namespace {

// Records live outside the index, as in the engine: the index stores positions into `keys`.
struct Table {
  FlatIndex idx;
  std::vector<uint64_t> keys;
  static uint64_t h(uint64_t k) { return hash_words(k, ~k); }
  uint32_t find(uint64_t k) const {
    return idx.find(h(k), [&](uint32_t i) { return keys[i] == k; });
  }
  uint32_t add(uint64_t k) {
    auto i = static_cast<uint32_t>(keys.size());
    keys.push_back(k);
    idx.insert(h(k), i);
    return i;
  }
};

}  // namespace

TEST(FlatIndex, EmptyFindsNothing) {
  Table t;
  EXPECT_EQ(t.find(1), FlatIndex::npos);
  EXPECT_EQ(t.idx.size(), 0u);
}

TEST(FlatIndex, FindsEveryInsertedKeyAcrossGrowth) {
  Table t;
  std::mt19937_64 rng(7);
  std::unordered_set<uint64_t> seen;
  while (t.keys.size() < 100000) {
    uint64_t k = rng();
    if (seen.insert(k).second) t.add(k);
  }
  EXPECT_EQ(t.idx.size(), 100000u);
  EXPECT_LE(2 * t.idx.size(), t.idx.capacity());  // load stays at most 1/2
  for (uint32_t i = 0; i < t.keys.size(); ++i) {
    ASSERT_EQ(t.find(t.keys[i]), i);
  }
  for (int n = 0; n < 100000; ++n) {
    uint64_t k = rng();
    if (!seen.count(k)) {
      ASSERT_EQ(t.find(k), FlatIndex::npos);
    }
  }
}

TEST(FlatIndex, SameHashDifferentKeysAreToldApartByTheRecord) {
  // Every key inserted under one hash: the probe sequence holds them all, is_key picks the right one.
  FlatIndex idx;
  std::vector<int> recs;
  const uint64_t h = 0x1234567890abcdefull;
  for (int k = 0; k < 200; ++k) {
    recs.push_back(k);
    idx.insert(h, static_cast<uint32_t>(k));
  }
  for (int k = 0; k < 200; ++k)
    EXPECT_EQ(idx.find(h, [&](uint32_t i) { return recs[i] == k; }), static_cast<uint32_t>(k));
  EXPECT_EQ(idx.find(h, [&](uint32_t i) { return recs[i] == 999; }), FlatIndex::npos);
  // A different hash with the same slot position (equal low tag bits) is not a match either.
  EXPECT_EQ(idx.find(h ^ (uint64_t{1} << 63), [](uint32_t) { return true; }), FlatIndex::npos);
}

TEST(FlatIndex, ResetThenRebuild) {
  // As the engine's compaction does: reset for the survivors' count, re-insert them renumbered.
  Table t;
  for (uint64_t k = 0; k < 5000; ++k) t.add(k * 977);
  std::vector<uint64_t> kept;
  for (uint64_t k : t.keys)
    if (k % 3 == 0) kept.push_back(k);
  t.idx.reset(kept.size());
  EXPECT_EQ(t.idx.size(), 0u);
  EXPECT_EQ(t.find(0), FlatIndex::npos);
  t.keys = kept;
  size_t cap = t.idx.capacity();
  for (uint32_t i = 0; i < kept.size(); ++i) t.idx.insert(Table::h(kept[i]), i);
  EXPECT_EQ(t.idx.capacity(), cap);  // reset() made room: no growth while re-inserting
  for (uint32_t i = 0; i < kept.size(); ++i) {
    ASSERT_EQ(t.find(kept[i]), i);
  }
  EXPECT_EQ(t.find(977), FlatIndex::npos);  // 977 % 3 != 0: dropped
}

TEST(FlatIndex, AgreesWithUnorderedMapOnTrafficLikeKeys) {
  // Keys shaped like the engine's flows (small ids, a few ports), looked up far more often than inserted.
  Table t;
  std::unordered_map<uint64_t, uint32_t> ref;
  std::mt19937_64 rng(11);
  for (int n = 0; n < 300000; ++n) {
    uint64_t k = (rng() % 64) | (rng() % 64) << 32 | (uint64_t{40000} + rng() % 64) << 48;
    auto it = ref.find(k);
    uint32_t got = t.find(k);
    if (it == ref.end()) {
      ASSERT_EQ(got, FlatIndex::npos);
      ref.emplace(k, t.add(k));
    } else {
      ASSERT_EQ(got, it->second);
    }
  }
}

TEST(FlatIndex, HashSpreadsStructuredKeysOverSlots) {
  // Sequential ids and ports differ in a few low bits; the slot position (hash's upper bits, masked) must
  // still spread them: 65,536 keys over 1,024 positions, no position far above the mean of 64.
  std::vector<int> count(1024);
  for (uint64_t a = 0; a < 256; ++a)
    for (uint64_t p = 0; p < 256; ++p) ++count[(hash_words(a | a << 32, 40000 + p, 6) >> 32) & 1023];
  for (int c : count) {
    EXPECT_GT(c, 20);
    EXPECT_LT(c, 120);
  }
  EXPECT_NE(hash_words(1, 2, 3), hash_words(2, 1, 3));
  EXPECT_NE(hash_words(1, 2, 3), hash_words(1, 2, 4));
}

TEST(FlatIndex, ResetEmptiesAndKeepsSlotsOfAboutTheRightSize) {
  Table t;
  for (uint64_t k = 0; k < 1000; ++k) t.add(k * 7919);
  const size_t cap = t.idx.capacity();  // 2,048 slots for 1,000 records at load <= 1/2
  t.idx.reset(900);                     // compaction forgot a tenth: the same slots, refilled in place
  EXPECT_EQ(t.idx.size(), 0u);
  EXPECT_EQ(t.idx.capacity(), cap);
  EXPECT_EQ(t.find(7919), FlatIndex::npos);
  t.keys.clear();
  for (uint64_t k = 0; k < 900; ++k) t.add(k * 7919);
  for (uint64_t k = 0; k < 900; ++k) ASSERT_EQ(t.find(k * 7919), k);
  EXPECT_EQ(t.find(900 * 7919), FlatIndex::npos);
  t.idx.reset(100);  // most forgotten: slots given back
  EXPECT_LT(t.idx.capacity(), cap);
  t.idx.reset(5000);  // more than the slots hold at load 1/2: grown
  EXPECT_GE(t.idx.capacity(), 10000u);
}
