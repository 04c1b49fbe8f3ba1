// The store's on-disk batch encoding (aggregator/store/batch_codec.hpp) and the WAL checkpointer: every
// batch reads back exactly as it was stored, rows of older stores (the wire message itself) still read,
// and corrupt rows are errors, never crashes or huge allocations. Real SQLite and zstd.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <random>
#include <thread>

#include "batch_codec.hpp"
#include "checkpointer.hpp"
#include "netprism/wire.hpp"
#include "store.hpp"
#include "support/pinned_messages.hpp"
#include "zstd_blob.hpp"

using namespace netprism;

namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

Flowlet flowlet(std::mt19937_64& rng, bool v6) {
  Flowlet f{};
  for (int i = 0; i < 16; ++i) {
    f.key.saddr[i] = static_cast<uint8_t>(rng() % 4);  // few distinct addresses, as in real batches
    f.key.daddr[i] = static_cast<uint8_t>(rng());
  }
  if (!v6) {  // v4-mapped
    for (auto* a : {f.key.saddr, f.key.daddr}) {
      std::memset(a, 0, 10);
      a[10] = a[11] = 0xff;
    }
  }
  f.key.ifindex = static_cast<uint32_t>(rng());
  f.key.sport = static_cast<uint16_t>(rng());
  f.key.dport = static_cast<uint16_t>(rng() % 3 ? 29500 : rng());
  f.key.qpn = static_cast<uint32_t>(rng() % 2 ? 0 : rng() & 0xffffff);
  f.key.proto = static_cast<uint8_t>(NP_PROTO_TCP + rng() % (NP_PROTO_ROCE - NP_PROTO_TCP + 1));
  f.key.dir = static_cast<uint8_t>(rng() % 2);
  f.key.family = v6 ? 6 : 4;
  f.first_ns = rng();  // any order, any magnitude: deltas wrap both ways
  f.last_ns = f.first_ns + rng() % (kMax - f.first_ns + 1);
  f.packets = rng() >> (rng() % 64);
  f.bytes = rng() >> (rng() % 64);
  f.payload_bytes = rng() >> (rng() % 64);
  for (auto& op : f.roce_ops) op = static_cast<uint32_t>(rng() >> (rng() % 64));
  f.last_psn = static_cast<uint32_t>(rng() & 0xffffff);
  f.tcp_flags = static_cast<uint16_t>(rng());
  f.end_reason = static_cast<uint8_t>(rng());
  return f;
}

Batch batch(std::mt19937_64& rng, std::size_t n) {
  Batch b;
  b.node = "node-" + std::to_string(rng() % 100);
  b.epoch = rng();
  b.seq = rng() % 1000;
  b.sent_ns = rng();
  for (std::size_t i = 0; i < n; ++i) b.flowlets.push_back(flowlet(rng, i % 3 == 0));
  b.rdma_samples = {{"mlx5_0", 1, 5, 6, 7, 8, 9, {{"out_of_buffer", 3}, {"np_cnp_sent", kMax}}}};
  b.rdma_bursts = {{"mlx5_1", 2, 10, 20, 30, 40, 50, 60}};
  b.qps = {{"mlx5_0", 1, 2, 3, "RC", "RTS", "10.0.0.1", "10.0.0.2", 4, "python"}};
  b.counters = {{"captured", rng()}, {"shipped", 1}};
  return b;
}

std::optional<Batch> round_trip(const Batch& b, std::string& err) {
  std::string z, scratch;
  if (!store::compress_stored(b, 1, z, scratch)) {
    err = "compression failed";
    return std::nullopt;
  }
  auto raw = store::zstd_decompress(z, 1u << 28, err);
  if (!raw) return std::nullopt;
  return store::decode_stored(*raw, err);
}

TEST(StoredBatch, RoundTripsEveryFieldAndRecordType) {
  std::mt19937_64 rng(1);
  for (std::size_t n : {0u, 1u, 2u, 7u, 256u, 3000u}) {
    Batch b = batch(rng, n);
    std::string err;
    auto d = round_trip(b, err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(*d, b) << n << " flowlets";
  }
}

TEST(StoredBatch, ExtremeValuesRoundTrip) {
  Batch b;
  b.node = "x";
  Flowlet lo{}, hi{};
  lo.key.proto = NP_PROTO_TCP;
  lo.key.family = 4;
  hi.key.proto = NP_PROTO_ROCE;
  hi.key.family = 6;
  hi.key.dir = NP_DIR_EGRESS;
  std::memset(hi.key.saddr, 0xff, 16);
  std::memset(hi.key.daddr, 0xff, 16);
  hi.key.ifindex = hi.key.qpn = hi.last_psn = std::numeric_limits<uint32_t>::max();
  hi.key.sport = hi.key.dport = hi.tcp_flags = std::numeric_limits<uint16_t>::max();
  hi.first_ns = hi.last_ns = hi.packets = hi.bytes = hi.payload_bytes = kMax;
  for (auto& op : hi.roce_ops) op = std::numeric_limits<uint32_t>::max();
  hi.end_reason = 255;
  b.flowlets = {lo, hi, lo, hi};  // deltas of +/- 2^64 - 1
  std::string err;
  auto d = round_trip(b, err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(*d, b);
}

TEST(StoredBatch, SmallerThanTheWireMessageCompressed) {
  std::mt19937_64 rng(2);
  Batch b = batch(rng, 256);
  for (auto& f : b.flowlets) {  // realistic: a handful of peers, increasing times
    f.key.family = 4;
    std::memset(f.key.saddr, 0, 10);
    f.key.saddr[10] = f.key.saddr[11] = 0xff;
    std::memcpy(f.key.daddr, f.key.saddr, 12);
    f.key.daddr[15] = static_cast<uint8_t>(rng() % 8);
  }
  std::string z, scratch;
  ASSERT_TRUE(store::compress_stored(b, 1, z, scratch));
  EXPECT_LT(z.size(), store::zstd_compress(wire::encode(b), 1).size());
}

TEST(StoredBatch, RowsOfOlderStoresHoldingTheWireMessageStillDecode) {
  std::mt19937_64 rng(3);
  Batch b = batch(rng, 50);
  std::string err;
  auto d = store::decode_stored(wire::encode(b), err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(*d, b);
  EXPECT_FALSE(store::decode_stored(wire::encode(Heartbeat{"n", 1, 2, {}}), err));
  EXPECT_NE(err.find("not a batch"), std::string::npos) << err;
}

// Regression (issue 18's fuzzing): encode_stored() copied from its per-thread buffer through a pointer read
// before the encoding reallocated it (argument evaluation order; clang builds stored garbage). A fresh thread
// has an empty buffer, so its first encoding must reallocate.
TEST(StoredBatch, EncodeStoredFromAFreshThread) {
  std::mt19937_64 rng(7);
  const Batch b = batch(rng, 40);
  std::string enc;
  std::thread([&] { store::encode_stored(b, enc); }).join();
  std::string err;
  auto d = store::decode_stored(enc, err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(*d, b);
}

TEST(StoredBatch, CorruptRowsAreErrorsNeverCrashes) {
  std::mt19937_64 rng(4);
  Batch b = batch(rng, 40);
  std::string enc;
  store::encode_stored(b, enc);
  std::string err;
  ASSERT_TRUE(store::decode_stored(enc, err)) << err;
  for (std::size_t n = 0; n < enc.size(); ++n) {  // every truncation
    err.clear();
    EXPECT_FALSE(store::decode_stored(enc.substr(0, n), err)) << n;
    EXPECT_FALSE(err.empty());
  }
  EXPECT_FALSE(store::decode_stored(enc + "x", err));
  for (int i = 0; i < 20000; ++i) {  // random damage: decoded or rejected, never a crash or a throw
    std::string m = enc;
    for (int k = 0; k < 1 + i % 4; ++k) m[rng() % m.size()] = static_cast<char>(rng());
    std::optional<Batch> d;
    ASSERT_NO_THROW(d = store::decode_stored(m, err));
    if (d) {
      for (const auto& f : d->flowlets) {  // whatever decodes satisfies the wire codec's own checks
        EXPECT_TRUE(f.key.family == 4 || f.key.family == 6);
        EXPECT_LE(f.first_ns, f.last_ns);
      }
    }
  }
  // A declared flowlet count far beyond the data and the wire limit is refused before any allocation.
  Batch empty;
  empty.node = "n";
  std::string e;
  store::encode_stored(empty, e);
  std::string rest(e.begin() + 4, e.end() - 2 - 21 * 2);  // varint rest_len + rest
  for (const char* magic : {"NPC1", "NPC2"}) {
    std::string huge = std::string(magic) + rest + std::string("\xff\xff\xff\xff\x0f\x00", 6);
    EXPECT_FALSE(store::decode_stored(huge, err)) << magic;
  }
}

// Rows written in the first column format (NPC1: each value's bytes together) still read back. The bytes
// below are what that encoder wrote for golden_batch() (columns of 0, 1, 2, 3 and 8 bytes per value).
Batch golden_batch() {
  Batch b;
  b.node = "n1";
  b.epoch = 7;
  b.seq = 3;
  b.sent_ns = 1000;
  for (int i = 0; i < 3; ++i) {
    Flowlet f{};
    f.key.saddr[10] = f.key.saddr[11] = 0xff;
    f.key.saddr[15] = 1;
    f.key.daddr[10] = f.key.daddr[11] = 0xff;
    f.key.daddr[15] = static_cast<uint8_t>(2 + i);
    f.key.ifindex = 2;
    f.key.sport = static_cast<uint16_t>(40000 + 300 * i);
    f.key.dport = 29500;
    f.key.proto = NP_PROTO_TCP;
    f.key.dir = static_cast<uint8_t>(i % 2);
    f.key.family = 4;
    f.first_ns = 1'700'000'000'000'000'000ull + 123456789ull * static_cast<uint64_t>(2 - i);
    f.last_ns = f.first_ns + 5000u * static_cast<uint64_t>(i);
    f.packets = 10u + 70000u * static_cast<uint64_t>(i);
    f.bytes = f.packets * 1500;
    f.payload_bytes = f.packets * 1448;
    f.tcp_flags = static_cast<uint16_t>(i == 2 ? 0x11 : 0x10);
    f.end_reason = 1;
    b.flowlets.push_back(f);
  }
  return b;
}

TEST(StoredBatch, RowsOfTheFirstColumnFormatStillDecode) {
  const std::string v1(
      "\x4e\x50\x43\x31\x11\x93\x01\x02\x99\xa2\x6e\x31\x07\x03\xcd\x03"
      "\xe8\x90\x90\x90\x90\x80\x03\x04\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\xff\xff\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\xff\xff\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\xff\xff\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\xff\xff\x00\x00\x00\x04\x00\x00\x01\x01\x00\x01\x02\x00"
      "\x02\x02\xc0\xb8\x02\x00\x00\x2c\x01\x58\x02\x00\xbc\xe6\x01\x00"
      "\x00\x00\x01\x01\x00\x00\x01\x00\x00\x04\x08\xa9\xb4\xde\x75\x2b"
      "\x9a\x0b\x7b\xfc\x39\x2f\x2f\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x88\x13\x10\x27\x03"
      "\x0a\x00\x00\x00\x70\x11\x01\xe0\x22\x02\x04\x98\x75\x00\x00\x00"
      "\x00\x40\x2c\x42\x06\x80\x58\x84\x0c\x04\x90\x71\x00\x00\x00\x00"
      "\x80\xa1\x0a\x06\x00\x43\x15\x0c\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x01\x10\x00\x00\x01\x00\x01",
      217);
  ASSERT_EQ(v1.substr(0, 4), "NPC1");
  std::string err;
  auto d = store::decode_stored(v1, err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(*d, golden_batch());
  // The current encoder writes the byte-plane format (NPC2), which reads back the same batch.
  std::string v2;
  store::encode_stored(golden_batch(), v2);
  EXPECT_EQ(v2.substr(0, 4), "NPC2");
  EXPECT_EQ(v2.size(), v1.size());  // the same bytes, in another order
  auto d2 = store::decode_stored(v2, err);
  ASSERT_TRUE(d2) << err;
  EXPECT_EQ(*d2, golden_batch());
}

// The current format (NPC2) is pinned too: the encoder writes these bytes for this batch, and they read back.
TEST(StoredBatch, RowsOfTheCurrentColumnFormatArePinned) {
  std::string enc, err;
  store::encode_stored(pinned::batch(), enc);
  EXPECT_EQ(enc, pinned::kBatchStored);
  auto d = store::decode_stored(pinned::kBatchStored, err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(*d, pinned::batch());
}

// A row an earlier build stored (QpEntry of 10 fields, before sq_psn/rq_psn/ts_ns) decodes, the PSNs 0.
TEST(StoredBatch, RowsWithQpEntriesOfEarlierBuildsDecode) {
  std::string err;
  auto d = store::decode_stored(pinned::kBatchStoredQpV10, err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(*d, pinned::batch());
}

// A corrupt value in a checked column is rejected with the field's name.
TEST(StoredBatch, InvalidColumnValuesAreRejectedByName) {
  for (auto [field, bad] : {std::pair{"proto", 9}, {"dir", 2}, {"family", 5}}) {
    Batch b = pinned::batch();
    Flowlet& f = b.flowlets[0];
    (std::string(field) == "proto" ? f.key.proto
     : std::string(field) == "dir" ? f.key.dir
                                   : f.key.family) = static_cast<uint8_t>(bad);
    std::string enc, err;
    store::encode_stored(b, enc);
    EXPECT_FALSE(store::decode_stored(enc, err)) << field;
    EXPECT_NE(err.find(std::string(field) + ": "), std::string::npos) << err;
  }
}

std::string tmpdir() {
  auto p = std::filesystem::temp_directory_path() /
           ("np_store_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(p);
  return p;
}

TEST(StoredBatch, StoreScanAndRecordingCopyReadBack) {
  const std::string dir = tmpdir(), copy_dir = tmpdir();
  std::mt19937_64 rng(5);
  std::vector<Batch> in;
  {
    store::Store s(dir, store::Db::Mode::kReadWrite);
    for (int i = 0; i < 20; ++i) {
      Batch b = batch(rng, 30);
      b.node = "n" + std::to_string(i % 3);
      b.seq = static_cast<uint64_t>(i);
      for (auto& f : b.flowlets) {  // inside the scanned range
        f.first_ns = 1000 + rng() % 1000;
        f.last_ns = f.first_ns + rng() % 1000;
      }
      EXPECT_TRUE(s.insert_batch(b, wire::encode(b), 1));
      EXPECT_FALSE(s.insert_batch(b, wire::encode(b), 2)) << "a duplicate is not stored twice";
      in.push_back(b);
    }
    // `netprism record` copies rows verbatim into another store.
    store::Store out(copy_dir, store::Db::Mode::kReadWrite);
    for (const auto& r : s.raw_batches(0, 0, kMax, 1u << 30)) out.insert_raw(r);
  }
  for (const auto& d : {dir, copy_dir}) {
    store::Store s(d, store::Db::Mode::kReadOnly);
    std::vector<Batch> got;
    std::vector<std::string> errors;
    s.scan_batches(
        std::nullopt, 0, kMax, [&](const Batch& b, uint64_t) { got.push_back(b); },
        [&](const std::string& e) { errors.push_back(e); });
    EXPECT_TRUE(errors.empty()) << errors.front();
    ASSERT_EQ(got.size(), in.size());
    for (const auto& b : in) EXPECT_NE(std::find(got.begin(), got.end(), b), got.end()) << b.seq;
  }
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(copy_dir);
}

TEST(Checkpointer, CopiesTheWalOffTheWritersCommits) {
  const std::string dir = tmpdir();
  {
    store::Store s(dir, store::Db::Mode::kReadWrite);
    store::Checkpointer c(s.db(), store::Store::resolve(dir), 100);
    std::mt19937_64 rng(6);
    for (int i = 0; i < 40; ++i) {  // ~40 x 30 KB: a few hundred 4 KiB pages
      store::Transaction tx(s.db());
      for (int k = 0; k < 10; ++k) {
        Batch b = batch(rng, 100);
        b.seq = static_cast<uint64_t>(i * 10 + k);
        s.insert_batch(b, wire::encode(b), 1);
      }
      tx.commit();
    }
    for (int i = 0; i < 200 && c.checkpoints() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_GT(c.checkpoints(), 0u);
  }
  store::Store r(dir, store::Db::Mode::kReadOnly);
  EXPECT_EQ(r.batch_count(), 400u);
  std::filesystem::remove_all(dir);
}

// The store's writers and the checkpointer write through the write-coalescing VFS
// (write_coalescing_vfs.hpp): what a commit wrote must be visible to another connection (the default VFS,
// as the CLI and the query thread read) the moment the commit returns, whole, and stay so while checkpoints
// move pages from the WAL into the database file and the WAL starts over.
TEST(WriteCoalescingVfs, EveryCommitIsVisibleToOtherConnectionsAtOnce) {
  const std::string dir = tmpdir();
  {
    store::Store w(dir, store::Db::Mode::kReadWrite);
    store::Checkpointer c(w.db(), store::Store::resolve(dir), 50);  // checkpoints every few commits
    store::Store r(dir, store::Db::Mode::kReadOnly);
    std::mt19937_64 rng(8);
    uint64_t seq = 0;
    for (int i = 0; i < 60; ++i) {
      std::vector<Batch> written;
      store::Transaction tx(w.db());
      for (int k = 0; k < 1 + i % 7; ++k) {  // commits of 1..7 batches: runs of every length
        Batch b = batch(rng, 50 + rng() % 400);
        b.node = "n";
        b.seq = seq++;
        b.sent_ns = 1000 + b.seq;
        for (auto& f : b.flowlets) {  // times a time-range scan finds (below 2^63)
          f.first_ns >>= 2;
          f.last_ns = f.first_ns + (f.last_ns >> 2);
        }
        ASSERT_TRUE(w.insert_batch(b, wire::encode(b), 1));
        written.push_back(std::move(b));
      }
      tx.commit();
      ASSERT_EQ(r.batch_count(), seq) << "commit " << i;
      // The batches just committed read back whole, field for field, from the other connection.
      std::vector<Batch> seen;
      r.scan_batches("n", 0, UINT64_MAX, [&](const Batch& b, uint64_t) {
        if (b.seq >= written.front().seq) seen.push_back(b);
      });
      ASSERT_EQ(seen.size(), written.size()) << "commit " << i;
      std::sort(seen.begin(), seen.end(), [](const Batch& a, const Batch& b) { return a.seq < b.seq; });
      for (std::size_t k = 0; k < seen.size(); ++k) EXPECT_EQ(seen[k], written[k]) << "commit " << i;
    }
    for (int i = 0; i < 200 && c.checkpoints() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_GT(c.checkpoints(), 0u);
  }
  // Reopened after every connection closed (the last one checkpoints the WAL into the file): all there.
  store::Store r(dir, store::Db::Mode::kReadOnly);
  EXPECT_EQ(r.batch_count(), 60u / 7 * 28 + 1 + 2 + 3 + 4);  // sum of 1 + i % 7 over i < 60
  std::filesystem::remove_all(dir);
}

}  // namespace
