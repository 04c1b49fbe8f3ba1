// The ingest store's segment files (aggregator/store/segment_log.hpp): batch bytes live beside the
// database, a committed row never names bytes that were not synced, duplicates and failed commits leave
// nothing a reader sees, crash leftovers are removed at start, retention hands whole segments back, and
// stores from before segments still read and are extended in place. Real SQLite, real files.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>

#include "batch_codec.hpp"
#include "netprism/wire.hpp"
#include "segment_log.hpp"
#include "sqlite.hpp"
#include "flows.hpp"
#include "store.hpp"

using namespace netprism;
namespace fs = std::filesystem;

namespace {

std::string tmpdir() {
  auto p = fs::temp_directory_path() /
           ("np_segstore_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
  fs::create_directories(p);
  return p;
}

struct TmpDir {
  std::string path = tmpdir();
  ~TmpDir() { fs::remove_all(path); }
};

// A batch of n flowlets whose bytes do not compress away (so sizes are predictable enough for limits).
Batch make_batch(const std::string& node, uint64_t seq, std::size_t n, uint64_t t_ns) {
  std::mt19937_64 rng(seq * 7919 + n);
  Batch b;
  b.node = node;
  b.epoch = 1;
  b.seq = seq;
  b.sent_ns = t_ns;
  for (std::size_t i = 0; i < n; ++i) {
    Flowlet f{};
    f.key.family = 4;
    f.key.saddr[10] = f.key.saddr[11] = f.key.daddr[10] = f.key.daddr[11] = 0xff;
    f.key.saddr[15] = 1;
    f.key.daddr[15] = static_cast<uint8_t>(2 + rng() % 8);
    f.key.sport = static_cast<uint16_t>(rng());
    f.key.dport = 29500;
    f.key.proto = NP_PROTO_TCP;
    f.first_ns = t_ns + rng() % 1000000;
    f.last_ns = f.first_ns + rng() % 1000000;
    f.bytes = rng();
    f.payload_bytes = rng();
    f.packets = rng() % 100000;
    b.flowlets.push_back(f);
  }
  return b;
}

std::vector<Batch> scan(store::Store& s, std::vector<std::string>* errors = nullptr) {
  std::vector<Batch> out;
  s.scan_batches(
      std::nullopt, 0, UINT64_MAX, [&](const Batch& b, uint64_t) { out.push_back(b); },
      [&](const std::string& e) {
        if (errors) errors->push_back(e);
      });
  std::sort(out.begin(), out.end(), [](const Batch& a, const Batch& b) { return a.seq < b.seq; });
  return out;
}

std::vector<std::string> segment_files(const std::string& dir) {
  std::vector<std::string> out;
  const auto sd = store::SegmentLog::dir_for(store::Store::resolve(dir));
  if (fs::exists(sd))
    for (const auto& e : fs::directory_iterator(sd)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

int64_t inline_bytes(const std::string& dir) {
  store::Db db(store::Store::resolve(dir), store::Db::Mode::kReadOnly);
  auto q = db.prepare("SELECT coalesce(sum(length(data)),0) FROM batches");
  return q.step() ? q.i64(0) : -1;
}

// A disk that fills at `limit` bytes per file, for as long as it lives: RLIMIT_FSIZE fails write() with
// EFBIG past it (SIGXFSZ ignored meanwhile), as a full disk fails it with ENOSPC.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t limit) : prev_(std::signal(SIGXFSZ, SIG_IGN)) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit small = old_;
    small.rlim_cur = limit;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, prev_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  bool ok() const { return ok_; }

 private:
  void (*prev_)(int);
  rlimit old_{};
  bool ok_ = false;
};

// Runs one group commit as the daemon's committer does.
bool commit_group(store::Store& s, const std::vector<Batch>& batches) {
  store::Transaction tx(s.db());
  bool all_fresh = true;
  for (const auto& b : batches) all_fresh = s.insert_batch(b, wire::encode(b), b.sent_ns) && all_fresh;
  s.commit(tx);
  return all_fresh;
}

TEST(SegmentStore, BatchBytesLiveInSegmentFilesAndReadBack) {
  TmpDir d;
  std::vector<Batch> in;
  {
    store::Store s(d.path, store::Db::Mode::kReadWrite);
    s.enable_segments(64u << 20);
    for (uint64_t g = 0; g < 5; ++g) {
      std::vector<Batch> group;
      for (uint64_t k = 0; k < 4; ++k) group.push_back(make_batch("n", g * 4 + k, 50, 1000000 * (g + 1)));
      EXPECT_TRUE(commit_group(s, group));
      in.insert(in.end(), group.begin(), group.end());
    }
    EXPECT_FALSE(commit_group(s, {in[3]})) << "a duplicate is acknowledged, not stored twice";
    EXPECT_EQ(s.batch_count(), 20u);
    EXPECT_GT(s.stored_bytes(), 20u * 50u) << "stored bytes count the segment bytes";
    // Another connection (the query server's, the CLI's) reads them while the writer is open.
    store::Store r(d.path, store::Db::Mode::kReadOnly);
    std::vector<std::string> errors;
    EXPECT_EQ(scan(r, &errors), in);
    EXPECT_TRUE(errors.empty());
  }
  EXPECT_EQ(inline_bytes(d.path), 0) << "no batch bytes inside the database";
  EXPECT_EQ(segment_files(d.path).size(), 1u);
  // Restarted: a new segment starts; everything before still reads; ids keep growing.
  {
    store::Store s(d.path, store::Db::Mode::kReadWrite);
    s.enable_segments(64u << 20);
    auto b = make_batch("n", 100, 50, 9000000);
    EXPECT_TRUE(commit_group(s, {b}));
    in.push_back(b);
    EXPECT_EQ(scan(s), in);
    // `netprism record` copies rows with their bytes into a single-file recording.
    TmpDir copy;
    store::Store out(copy.path, store::Db::Mode::kReadWrite);
    for (const auto& r : s.raw_batches(0, 0, UINT64_MAX, 1u << 30)) out.insert_raw(r);
    EXPECT_EQ(scan(out), in);
    EXPECT_TRUE(segment_files(copy.path).empty()) << "a recording holds its bytes inline";
  }
  EXPECT_EQ(segment_files(d.path).size(), 2u);
}

TEST(SegmentStore, ACommitBypassingTheSegmentFlushIsRefused) {
  TmpDir d;
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  s.enable_segments(64u << 20);
  auto b = make_batch("n", 1, 20, 1000);
  {
    store::Transaction tx(s.db());
    ASSERT_TRUE(s.insert_batch(b, wire::encode(b), 1));
    EXPECT_THROW(tx.commit(), store::SqliteError) << "rows naming unwritten bytes must not commit";
  }
  EXPECT_EQ(s.batch_count(), 0u);
  // Outside a transaction the INSERT would commit itself before the bytes exist: refused.
  EXPECT_THROW(s.insert_batch(b, wire::encode(b), 1), store::SqliteError);
  EXPECT_EQ(s.batch_count(), 0u);
  EXPECT_TRUE(commit_group(s, {b})) << "the batch is not taken for a duplicate afterwards";
  EXPECT_EQ(scan(s), std::vector<Batch>{b});
}

// A write that fails (the disk full; here the file size limit, which fails write() the same way) fails
// the commit: nothing of the group is stored, and the next group writes over the unreferenced bytes.
TEST(SegmentStore, AFailedSegmentWriteStoresNothingAndTheNextCommitSucceeds) {
  TmpDir d;
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  s.enable_segments(64u << 20);
  std::vector<Batch> in{make_batch("n", 0, 40, 1000)};
  ASSERT_TRUE(commit_group(s, in));
  const auto seg =
      fs::path(store::SegmentLog::dir_for(store::Store::resolve(d.path))) / segment_files(d.path)[0];
  const auto used = fs::file_size(seg);
  // The segment's append hits the limit first (its bytes are written before SQLite writes the commit).
  std::vector<Batch> failed{make_batch("n", 1, 400, 2000), make_batch("n", 2, 400, 3000)};
  {
    FileSizeLimit limit(used + 100);
    ASSERT_TRUE(limit.ok());
    EXPECT_THROW(commit_group(s, failed), store::SqliteError);
  }
  EXPECT_EQ(s.batch_count(), 1u) << "nothing of the failed group is stored";
  EXPECT_EQ(scan(s), in);
  // Resent after the failure (the agents never got an ACK): stored now, and read back whole.
  ASSERT_TRUE(commit_group(s, failed));
  in.insert(in.end(), failed.begin(), failed.end());
  store::Store r(d.path, store::Db::Mode::kReadOnly);
  EXPECT_EQ(scan(r), in);
}

TEST(SegmentStore, FilesNoCommittedRowNamesAreRemovedAtStart) {
  TmpDir d;
  std::vector<Batch> in{make_batch("n", 0, 30, 1000)};
  {
    store::Store s(d.path, store::Db::Mode::kReadWrite);
    s.enable_segments(64u << 20);
    ASSERT_TRUE(commit_group(s, in));
  }
  const auto sd = store::SegmentLog::dir_for(store::Store::resolve(d.path));
  // What a crash between a segment's write and its commit leaves: a file no segments row names.
  std::ofstream(sd + "/0000000007.seg") << "bytes of a transaction that never committed";
  std::ofstream(sd + "/notes.txt") << "not ours: left alone";
  {
    store::Store s(d.path, store::Db::Mode::kReadWrite);
    s.enable_segments(64u << 20);
    EXPECT_EQ(segment_files(d.path), (std::vector<std::string>{"0000000001.seg", "notes.txt"}));
    auto b = make_batch("n", 1, 30, 2000);
    ASSERT_TRUE(commit_group(s, {b}));
    in.push_back(b);
    EXPECT_EQ(segment_files(d.path),
              (std::vector<std::string>{"0000000001.seg", "0000000008.seg", "notes.txt"}))
        << "numbering continues after the highest file seen";
    EXPECT_EQ(scan(s), in);
  }
}

TEST(SegmentStore, RetentionDeletesSegmentsNoRowUsesAnyMore) {
  TmpDir d;
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  s.enable_segments(1);  // every batch a segment of its own
  std::vector<Batch> in;
  for (uint64_t i = 0; i < 6; ++i) {
    in.push_back(make_batch("n", i, 20, (i + 1) * 1000000000ull));
    ASSERT_TRUE(commit_group(s, {in.back()}));
  }
  ASSERT_EQ(segment_files(d.path).size(), 6u);
  // Age: everything that ended before the 4th batch's start goes.
  auto r = s.apply_retention(4 * 1000000000ull, 0, s.stored_bytes());
  EXPECT_EQ(r.deleted_batches, 3u);
  EXPECT_EQ(segment_files(d.path).size(), 6u) << "files stay one pass longer, for readers' snapshots";
  EXPECT_EQ(s.apply_retention(0, 0, s.stored_bytes()).deleted_batches, 0u);
  EXPECT_EQ(segment_files(d.path).size(), 3u) << "then their segments' files are deleted";
  in.erase(in.begin(), in.begin() + 3);
  EXPECT_EQ(scan(s), in);
  // Size: keep about one batch's bytes.
  const uint64_t one = s.stored_bytes() / 3;
  r = s.apply_retention(0, one + one / 2, s.stored_bytes());
  EXPECT_EQ(r.deleted_batches, 2u);
  EXPECT_LE(r.stored_bytes, one + one / 2);
  s.apply_retention(0, 0, s.stored_bytes());
  EXPECT_EQ(segment_files(d.path).size(), 1u) << "only the newest batch's segment is left";
  EXPECT_EQ(scan(s), std::vector<Batch>{in.back()});
}

// A data dir written before segments: its batches table has no segment columns and its bytes are inline.
TEST(SegmentStore, StoresFromBeforeSegmentsReadAndAreExtendedInPlace) {
  TmpDir d;
  const std::string db_file = store::Store::resolve(d.path);
  auto old = make_batch("n", 0, 25, 1000);
  {
    store::Db db(db_file, store::Db::Mode::kReadWrite);
    db.exec(
        "CREATE TABLE batches(id INTEGER PRIMARY KEY, node TEXT NOT NULL, epoch INTEGER NOT NULL, seq "
        "INTEGER "
        "NOT NULL, received_ns INTEGER NOT NULL, first_ns INTEGER NOT NULL, last_ns INTEGER NOT NULL, "
        "records "
        "INTEGER NOT NULL, raw_bytes INTEGER NOT NULL, data BLOB NOT NULL, UNIQUE(node, epoch, seq))");
    std::string z, scratch;
    ASSERT_TRUE(store::compress_stored(old, 1, z, scratch));
    db.prepare(
          "INSERT INTO batches(node,epoch,seq,received_ns,first_ns,last_ns,records,raw_bytes,data) "
          "VALUES('n',1,0,1,1000,3000000,25,100,?)")
        .bind_blob(1, z.data(), z.size())
        .run();
  }
  {
    store::Store r(d.path, store::Db::Mode::kReadOnly);
    EXPECT_EQ(scan(r), std::vector<Batch>{old});
    EXPECT_GT(r.stored_bytes(), 0u);
  }
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  s.enable_segments(64u << 20);
  auto b = make_batch("n", 1, 25, 5000000);
  ASSERT_TRUE(commit_group(s, {b}));
  EXPECT_FALSE(commit_group(s, {old})) << "the old row still counts for duplicates";
  EXPECT_EQ(scan(s), (std::vector<Batch>{old, b}));
}

}  // namespace

namespace {

// The database copied without its segment directory (an operator's partial backup): every read says which
// segment is missing; nothing crashes, and `netprism record` (raw_batches) fails loudly instead of copying
// rows without their bytes.
TEST(SegmentStore, ADatabaseWithoutItsSegmentsReportsEveryMissingBatch) {
  TmpDir d, partial;
  {
    store::Store s(d.path, store::Db::Mode::kReadWrite);
    s.enable_segments(64u << 20);
    ASSERT_TRUE(commit_group(s, {make_batch("n", 0, 10, 1000), make_batch("n", 1, 10, 2000)}));
  }
  fs::copy_file(store::Store::resolve(d.path), store::Store::resolve(partial.path));
  store::Store r(partial.path, store::Db::Mode::kReadOnly);
  std::vector<std::string> errors;
  EXPECT_TRUE(scan(r, &errors).empty());
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("is gone"), std::string::npos) << errors[0];
  EXPECT_THROW(r.raw_batches(0, 0, UINT64_MAX, 1u << 30), store::SqliteError);
}

}  // namespace

namespace {

// Rows whose segment fields are corrupt (a length of 2^50, an offset past the end, a segment that never
// existed) are errors naming the row; nothing is allocated for them and the other rows still read.
TEST(SegmentStore, CorruptSegmentFieldsAreErrorsNeverHugeAllocations) {
  TmpDir d;
  std::vector<Batch> in;
  {
    store::Store s(d.path, store::Db::Mode::kReadWrite);
    s.enable_segments(64u << 20);
    for (uint64_t i = 0; i < 4; ++i) in.push_back(make_batch("n", i, 10, 1000 * (i + 1)));
    ASSERT_TRUE(commit_group(s, in));
  }
  {
    store::Db db(store::Store::resolve(d.path), store::Db::Mode::kReadWrite);
    db.exec("UPDATE batches SET seg_len = 1125899906842624 WHERE seq = 1");
    db.exec("UPDATE batches SET seg_off = 9223372036854775000 WHERE seq = 2");
    db.exec("UPDATE batches SET seg = 999999 WHERE seq = 3");
  }
  store::Store r(d.path, store::Db::Mode::kReadOnly);
  std::vector<std::string> errors;
  EXPECT_EQ(scan(r, &errors), std::vector<Batch>{in[0]});
  EXPECT_EQ(errors.size(), 3u);
}

}  // namespace

namespace {

// The segment's bytes were flushed, then the COMMIT failed (here: the WAL cannot grow). SQLite's recovery
// could still replay such a commit after a crash, so its bytes are never written over: the next commit goes
// to a new segment, and everything committed reads back.
TEST(SegmentStore, BytesOfACommitThatFailedAfterTheirFlushAreNeverWrittenOver) {
  TmpDir d;
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  s.enable_segments(64u << 20);
  std::vector<Batch> in;
  for (uint64_t i = 0; i < 30; ++i) {  // many small commits: the WAL grows well past the segment
    in.push_back(make_batch("n", i, 3, 1000 * (i + 1)));
    ASSERT_TRUE(commit_group(s, {in.back()}));
  }
  const auto db_file = store::Store::resolve(d.path);
  const auto seg_dir = store::SegmentLog::dir_for(db_file);
  const auto seg_used = fs::file_size(seg_dir + "/" + segment_files(d.path)[0]);
  const auto wal = fs::file_size(db_file + "-wal");
  ASSERT_GT(wal, seg_used + 64 * 1024) << "the test needs the WAL's end far beyond the segment's";
  {
    FileSizeLimit limit(seg_used + 32 * 1024);  // the segment's append fits, the WAL's does not
    ASSERT_TRUE(limit.ok());
    EXPECT_THROW(commit_group(s, {make_batch("n", 100, 20, 900000)}), store::SqliteError);
  }
  ASSERT_GT(fs::file_size(seg_dir + "/" + segment_files(d.path)[0]), seg_used)
      << "the failed group's bytes were flushed before its COMMIT failed";
  in.push_back(make_batch("n", 101, 20, 950000));
  ASSERT_TRUE(commit_group(s, {in.back()}));
  EXPECT_EQ(segment_files(d.path).size(), 2u) << "the next commit went to a new segment";
  std::sort(in.begin(), in.end(), [](const Batch& a, const Batch& b) { return a.seq < b.seq; });
  store::Store r(d.path, store::Db::Mode::kReadOnly);
  EXPECT_EQ(scan(r), in);
}

}  // namespace

namespace {

// An agent whose clock runs ahead has the newest-looking rows in every segment, so deleting rows by their
// times would neither empty a segment nor spare the other agents' newest batches. The size bound deletes in
// receive order: the newest batches stay, the oldest segments empty, and the disk follows the bound.
TEST(SegmentStore, ASizeBoundHoldsOnDiskWhenASkewedClockPinsEverySegment) {
  TmpDir d;
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  const uint64_t kFuture = 4000000000000000000ull;  // year 2096
  std::string z, scratch;
  ASSERT_TRUE(store::compress_stored(make_batch("ok", 0, 40, 1000), 1, z, scratch));
  const uint64_t seg_bytes = 2 * z.size() + z.size() / 2;  // about two batches per segment
  s.enable_segments(seg_bytes);
  std::vector<Batch> newest;
  for (uint64_t i = 0; i < 20; ++i) {
    std::vector<Batch> g{make_batch("ok", i, 40, 1000000 * (i + 1)), make_batch("ahead", i, 40, kFuture + i)};
    ASSERT_TRUE(commit_group(s, g));
    if (i >= 18) newest.insert(newest.end(), g.begin(), g.end());
  }
  auto on_disk = [&] {
    uint64_t n = 0;
    for (const auto& f : segment_files(d.path))
      n += fs::file_size(fs::path(store::SegmentLog::dir_for(store::Store::resolve(d.path))) / f);
    return n;
  };
  const uint64_t before = on_disk(), bound = before / 4;
  auto r = s.apply_retention(0, bound, s.stored_bytes());
  EXPECT_GT(r.deleted_batches, 0u);
  EXPECT_LE(r.stored_bytes, bound + seg_bytes);
  s.apply_retention(0, bound, r.stored_bytes);  // the freed files go one pass later
  EXPECT_LE(on_disk(), bound + 2 * seg_bytes) << "before: " << before;
  auto kept = scan(s);
  for (const auto& b : newest)
    EXPECT_NE(std::find(kept.begin(), kept.end(), b), kept.end()) << b.node << b.seq;
}

}  // namespace

// Query bounds (issue 18): a flows query past its deadline stops scanning with QueryDeadline.
TEST(SegmentStore, FlowsQueryStopsAtItsDeadline) {
  TmpDir d;
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  s.enable_segments(64u << 20);
  ASSERT_TRUE(commit_group(s, {make_batch("n", 0, 50, 1000000), make_batch("n", 1, 50, 2000000)}));
  store::FlowQuery q;
  EXPECT_GT(store::query_flows(s, q, {})["total_flows"].get<uint64_t>(), 0u);
  q.deadline = std::chrono::steady_clock::now() - std::chrono::milliseconds(1);
  EXPECT_THROW(store::query_flows(s, q, {}), store::QueryDeadline);
}
