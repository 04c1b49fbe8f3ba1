// Retention (issue 20): by receive time, so agents' skewed clocks neither delete nor pin others' data;
// duplicates still recognised after retention deleted the batches (also across a reopen); and retention on
// its own connection beside the ingest writer's, as the daemon runs it. Real SQLite, real segment files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "netprism/wire.hpp"
#include "store.hpp"

using namespace netprism;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kSec = 1000000000ull;
constexpr uint64_t kYear = 365ull * 24 * 3600 * kSec;

struct TmpDir {
  std::string path = [] {
    auto p = fs::temp_directory_path() /
             ("np_retention_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(p);
    return p.string();
  }();
  ~TmpDir() { fs::remove_all(path); }
};

Batch make_batch(const std::string& node, uint64_t seq, uint64_t record_ns) {
  Batch b;
  b.node = node;
  b.epoch = 1;
  b.seq = seq;
  b.sent_ns = record_ns;
  for (int i = 0; i < 5; ++i) {
    Flowlet f{};
    f.key.family = 4;
    f.key.saddr[15] = 1;
    f.key.daddr[15] = 2;
    f.key.sport = static_cast<uint16_t>(1000 + seq * 10 + i);
    f.key.dport = 29500;
    f.key.proto = NP_PROTO_TCP;
    f.first_ns = record_ns + i;
    f.last_ns = record_ns + i + 1;
    f.bytes = 100 + seq;
    b.flowlets.push_back(f);
  }
  return b;
}

// One group commit as the daemon's committer does, every batch received at received_ns (aggregator clock).
// Returns how many were fresh.
int commit_group(store::Store& s, const std::vector<Batch>& batches, uint64_t received_ns) {
  store::Transaction tx(s.db());
  int fresh = 0;
  for (const auto& b : batches) fresh += s.insert_batch(b, wire::encode(b), received_ns) ? 1 : 0;
  s.commit(tx);
  return fresh;
}

// "n<i>" (appended: GCC 12's -Wrestrict misfires on string operator+ with to_string).
std::string name(uint64_t i) {
  std::string n = "n";
  n += std::to_string(i);
  return n;
}

std::vector<std::pair<std::string, uint64_t>> kept(store::Store& s) {
  std::vector<std::pair<std::string, uint64_t>> out;
  s.scan_batches(std::nullopt, 0, UINT64_MAX,
                 [&](const Batch& b, uint64_t) { out.emplace_back(b.node, b.seq); });
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t segment_file_count(const std::string& dir) {
  std::size_t n = 0;
  const auto sd = store::SegmentLog::dir_for(store::Store::resolve(dir));
  if (fs::exists(sd))
    for (const auto& e : fs::directory_iterator(sd)) n += e.path().extension() == ".seg" ? 1 : 0;
  return n;
}

TEST(Retention, AgeGoesByReceiveTimeNotByTheAgentsClocks) {
  TmpDir d;
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  const uint64_t now = 2000 * kSec + 40 * kYear;  // the aggregator's clock, 2010-ish
  // Received long ago: one agent with a correct clock, one years ahead (its records look brand new), one
  // years behind.
  ASSERT_EQ(commit_group(s,
                         {make_batch("ok", 1, now - 7200 * kSec), make_batch("ahead", 1, now + 5 * kYear),
                          make_batch("behind", 1, now - 7200 * kSec - 5 * kYear)},
                         now - 7200 * kSec),
            3);
  // Received just now: the same three clocks.
  ASSERT_EQ(commit_group(s,
                         {make_batch("ok", 2, now), make_batch("ahead", 2, now + 5 * kYear),
                          make_batch("behind", 2, now - 5 * kYear)},
                         now),
            3);
  auto r = s.apply_retention(now - 3600 * kSec, 0, s.stored_bytes());
  EXPECT_EQ(r.deleted_batches, 3u);
  EXPECT_EQ(kept(s), (std::vector<std::pair<std::string, uint64_t>>{{"ahead", 2}, {"behind", 2}, {"ok", 2}}))
      << "the ahead agent's old batch must not be pinned, the behind agent's new one must not be deleted";
  EXPECT_GT(r.freed_bytes, 0u);
  EXPECT_EQ(r.stored_bytes, s.stored_bytes());
}

TEST(Retention, SizeBoundDeletesInReceiveOrderWhateverTheRecordTimes) {
  TmpDir d;
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  // Received in this order; record times the reverse (a clock far behind last).
  for (uint64_t i = 0; i < 6; ++i)
    ASSERT_EQ(commit_group(s, {make_batch(name(i), 1, (10 - i) * kYear)}, (i + 1) * kSec), 1);
  const uint64_t total = s.stored_bytes();
  auto r = s.apply_retention(0, total / 2, total);
  EXPECT_GE(r.deleted_batches, 3u);
  auto k = kept(s);
  ASSERT_FALSE(k.empty());
  EXPECT_EQ(k.back().first, "n5") << "the last received stays";
  for (const auto& [node, seq] : k) EXPECT_GE(node, name(r.deleted_batches));
}

TEST(Retention, AResentBatchIsADuplicateAfterRetentionDeletedIt) {
  TmpDir d;
  const std::vector<Batch> sent = {make_batch("a", 1, kSec), make_batch("a", 2, kSec),
                                   make_batch("a", 4, kSec), make_batch("b", 7, kSec)};
  {
    store::Store s(d.path, store::Db::Mode::kReadWrite);
    s.enable_segments(64u << 20);
    ASSERT_EQ(commit_group(s, sent, 10 * kSec), 4);
    EXPECT_EQ(s.apply_retention(20 * kSec, 0, s.stored_bytes()).deleted_batches, 4u);
    EXPECT_TRUE(kept(s).empty());
    for (const auto& b : sent) {
      EXPECT_EQ(commit_group(s, {b}, 30 * kSec), 0) << b.node << " seq " << b.seq << " is a resend";
      EXPECT_TRUE(s.retired(b.node, b.epoch, b.seq));
    }
    EXPECT_FALSE(s.retired("a", 1, 3)) << "seq 3 was never received";
    EXPECT_EQ(commit_group(s, {make_batch("a", 3, kSec)}, 30 * kSec), 1) << "a batch never seen is stored";
    Batch other_epoch = make_batch("a", 1, kSec);
    other_epoch.epoch = 2;
    EXPECT_EQ(commit_group(s, {other_epoch}, 30 * kSec), 1) << "the same seq of another epoch is new";
  }
  // After a restart (a new connection, the writer's state gone) the record still holds.
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  s.enable_segments(64u << 20);
  for (const auto& b : sent) EXPECT_EQ(commit_group(s, {b}, 40 * kSec), 0) << b.node << " seq " << b.seq;
  EXPECT_EQ(kept(s), (std::vector<std::pair<std::string, uint64_t>>{{"a", 1}, {"a", 3}}));
  // Consecutive deletions stay one interval per epoch.
  store::Db db(store::Store::resolve(d.path), store::Db::Mode::kReadOnly);
  auto q = db.prepare("SELECT count(*) FROM retired_seqs WHERE node='a' AND epoch=1");
  ASSERT_TRUE(q.step());
  EXPECT_EQ(q.i64(0), 2) << "[1,2] and [4,4]";
}

TEST(Retention, RunsOnItsOwnConnectionBesideTheWriter) {
  TmpDir d;
  store::Store writer(d.path, store::Db::Mode::kReadWrite);
  writer.enable_segments(1);  // every batch a segment of its own
  store::Store ret(d.path, store::Db::Mode::kReadWrite);
  ret.enable_retention();
  for (uint64_t i = 0; i < 5; ++i)
    ASSERT_EQ(commit_group(writer, {make_batch("n", i, kSec)}, (i + 1) * kSec), 1);
  ASSERT_EQ(segment_file_count(d.path), 5u);
  auto r = ret.apply_retention(4 * kSec, 0, writer.stored_bytes());
  EXPECT_EQ(r.deleted_batches, 3u);
  EXPECT_EQ(segment_file_count(d.path), 5u) << "files stay one pass longer, for readers' snapshots";
  // The writer goes on meanwhile (its transactions and retention's interleave).
  ASSERT_EQ(commit_group(writer, {make_batch("n", 5, kSec)}, 6 * kSec), 1);
  EXPECT_EQ(commit_group(writer, {make_batch("n", 1, kSec)}, 6 * kSec), 0) << "deleted, still a duplicate";
  ret.apply_retention(0, 0, writer.stored_bytes());
  EXPECT_EQ(segment_file_count(d.path), 3u) << "the three freed segments' files are gone";
  // Everything: the writer's current segment is never freed, even when its rows are all deleted.
  r = ret.apply_retention(100 * kSec, 0, writer.stored_bytes());
  EXPECT_EQ(r.deleted_batches, 3u);
  ret.apply_retention(0, 0, 0);
  EXPECT_EQ(segment_file_count(d.path), 1u) << "only the segment being written is left";
  ASSERT_EQ(commit_group(writer, {make_batch("n", 9, kSec)}, 200 * kSec), 1);
  EXPECT_EQ(kept(writer), (std::vector<std::pair<std::string, uint64_t>>{{"n", 9}}));
}

}  // namespace
