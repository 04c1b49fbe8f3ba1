#include "spool.hpp"

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "agent/test_util.hpp"

using netprism::agent::BatchKey;
using netprism::agent::Spool;
using netprism::test::TempDir;

namespace {
std::string payload(uint64_t seq, std::size_t n) {
  std::string s(n, 'x');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (seq + i) % 26);
  return s;
}
constexpr uint64_t kHeader = 32;
}  // namespace

TEST(Spool, StoresLoadsAndErases) {
  TempDir d;
  Spool s(d / "spool", 1 << 20);
  std::string err;
  ASSERT_TRUE(s.open(err)) << err;
  ASSERT_TRUE(s.push({7, 0}, payload(0, 100), 3));
  ASSERT_TRUE(s.push({7, 1}, payload(1, 200), 5));
  EXPECT_EQ(s.count(), 2u);
  EXPECT_EQ(s.records(), 8u);
  EXPECT_EQ(s.bytes(), 300 + 2 * kHeader);
  EXPECT_EQ(s.load({7, 1}), payload(1, 200));
  s.erase({7, 0});
  EXPECT_EQ(s.count(), 1u);
  EXPECT_EQ(*s.oldest(), (BatchKey{7, 1}));
  EXPECT_FALSE(std::filesystem::exists(d / "spool/0000000000000007-0000000000000000.npb"));
}

TEST(Spool, BoundedDropsOldestAndCountsIt) {
  TempDir d;
  const uint64_t per = 1000 + kHeader;
  Spool s(d.path(), 5 * per);  // room for exactly five batches
  std::string err;
  ASSERT_TRUE(s.open(err)) << err;
  for (uint64_t i = 0; i < 12; ++i)
    ASSERT_TRUE(s.push({1, i}, payload(i, 1000), static_cast<uint32_t>(i + 1)));
  EXPECT_EQ(s.count(), 5u);
  EXPECT_LE(s.bytes(), s.max_bytes());
  EXPECT_EQ(*s.oldest(), (BatchKey{1, 7}));  // 0..6 dropped, oldest first
  EXPECT_EQ(s.stats().dropped_batches, 7u);
  EXPECT_EQ(s.stats().dropped_records, 1u + 2 + 3 + 4 + 5 + 6 + 7);
  // A batch larger than the whole spool cannot be kept: refused and counted, nothing else dropped.
  EXPECT_FALSE(s.push({1, 99}, payload(0, 6 * per), 42));
  EXPECT_EQ(s.count(), 5u);
  EXPECT_EQ(s.stats().dropped_records, 28u + 42u);
}

TEST(Spool, SurvivesRestart) {
  TempDir d;
  {
    Spool s(d.path(), 1 << 20);
    std::string err;
    ASSERT_TRUE(s.open(err)) << err;
    for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(s.push({5, i}, payload(i, 300 + i), 10));
    // An interrupted write from a crash: never renamed into place.
    std::ofstream(d / ".tmp-0000000000000005-0000000000000009.npb") << "partial";
  }
  Spool s(d.path(), 1 << 20);
  std::string err;
  ASSERT_TRUE(s.open(err)) << err;
  EXPECT_EQ(s.count(), 4u);
  EXPECT_EQ(s.records(), 40u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(s.load({5, i}), payload(i, 300 + i));
  EXPECT_FALSE(std::filesystem::exists(d / ".tmp-0000000000000005-0000000000000009.npb"));
  // A smaller bound on the next start is honoured at once, oldest first, counted.
  Spool small(d.path(), 2 * (302 + kHeader) + 10);
  ASSERT_TRUE(small.open(err));
  EXPECT_EQ(small.count(), 2u);
  EXPECT_EQ(*small.oldest(), (BatchKey{5, 2}));
  EXPECT_EQ(small.stats().dropped_batches, 2u);
}

TEST(Spool, CorruptFilesAreDetectedCountedAndRemoved) {
  TempDir d;
  std::string err;
  {
    Spool s(d.path(), 1 << 20);
    ASSERT_TRUE(s.open(err));
    ASSERT_TRUE(s.push({1, 0}, payload(0, 100), 4));
    ASSERT_TRUE(s.push({1, 1}, payload(1, 100), 6));
  }
  {  // flip one payload byte of seq 0, truncate seq 1
    std::fstream f(d / "0000000000000001-0000000000000000.npb",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(kHeader + 10);
    f.put('#');
  }
  std::filesystem::resize_file(d / "0000000000000001-0000000000000001.npb", kHeader + 50);
  Spool s(d.path(), 1 << 20);
  ASSERT_TRUE(s.open(err));
  EXPECT_EQ(s.count(), 1u);  // the truncated one is dropped at open
  EXPECT_EQ(s.stats().corrupt_files, 1u);
  EXPECT_FALSE(s.load({1, 0}).has_value());  // checksum mismatch
  EXPECT_EQ(s.stats().corrupt_files, 2u);
  EXPECT_EQ(s.stats().dropped_records, 4u);
  EXPECT_EQ(s.count(), 0u);
}

TEST(Spool, UnwritableDirectoryIsAClearError) {
  Spool s("/proc/netprism-no-such-dir", 1 << 20);
  std::string err;
  EXPECT_FALSE(s.open(err));
  EXPECT_NE(err.find("/proc/netprism-no-such-dir"), std::string::npos) << err;
}
