// What one batch costs in the aggregator's prepare stage (no I/O): wire decode with limits, column
// encoding, zstd -- ns per record of each, and the stored bytes per record, on the ingest bench's batches.
// Usage: prepare_bench [zstd levels...]   (default: 1)
#include <chrono>
#include <iostream>
#include <random>

#include "batch_codec.hpp"
#include "netprism/wire.hpp"
#include "test_sender.hpp"

using namespace netprism;
using netprism::test::unix_ns;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::vector<int> levels;
  for (int i = 1; i < argc; ++i) levels.push_back(std::stoi(argv[i]));
  if (levels.empty()) levels.push_back(1);
  // The ingest bench's records (bench/ingest/ingest_bench.cpp make_batches): one sender's batches.
  std::mt19937_64 rng(42);
  const int kBatches = 400, kRecords = 256;
  std::vector<std::string> wire_msgs;
  uint64_t t = unix_ns() - 3600ull * 1000000000ull;
  for (int b = 0; b < kBatches; ++b) {
    Batch batch;
    batch.node = "bench0";
    batch.epoch = 1;
    batch.seq = static_cast<uint64_t>(b);
    batch.sent_ns = unix_ns();
    for (int r = 0; r < kRecords; ++r) {
      std::string peer = "10.213.9." + std::to_string(rng() % 64 + 1);
      uint64_t first = t + static_cast<uint64_t>(b) * 100000000ull + rng() % 100000000ull;
      uint64_t pk = 1 + rng() % 2000;
      batch.flowlets.push_back(
          test::make_flowlet("10.213.9.1", peer, static_cast<uint16_t>(40000 + rng() % 64), 29500, first,
                             first + rng() % 5000000, pk * 1500, pk, static_cast<uint8_t>(rng() % 2)));
    }
    batch.counters = {{"captured", static_cast<uint64_t>(b) * kRecords},
                      {"shipped", static_cast<uint64_t>(b)}};
    wire_msgs.push_back(wire::encode(batch));
  }
  const double records = static_cast<double>(kBatches) * kRecords;
  auto ns_per = [&](auto fn) {
    double best = 1e18;
    for (int rep = 0; rep < 7; ++rep) {
      auto t0 = Clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / records);
    }
    return best;
  };
  std::vector<Batch> decoded(kBatches);
  double dec = ns_per([&] {
    for (int b = 0; b < kBatches; ++b)
      decoded[b] = std::move(std::get<Batch>(wire::decode(wire_msgs[b], {}).message->body));
  });
  std::vector<std::string> enc(kBatches);
  double en = ns_per([&] {
    for (int b = 0; b < kBatches; ++b) store::encode_stored(decoded[b], enc[b]);
  });
  std::cout << "decode " << dec << " ns/record, encode " << en << " ns/record, encoded " << [&] {
    double s = 0;
    for (auto& e : enc) s += e.size();
    return s / records;
  }() << " B/record\n";
  // What the daemon runs per batch (ingest.cpp prepare()): encode into a per-thread buffer, zstd it into
  // another, copy the result out exactly sized (the store, then the live analysis, take it).
  std::string scratch, zbuf;
  for (int level : levels) {
    double bytes = 0;
    double z = ns_per([&] {
      bytes = 0;
      for (int b = 0; b < kBatches; ++b) {
        if (!store::compress_stored(decoded[b], level, zbuf, scratch)) throw std::runtime_error("zstd");
        enc[b].assign(zbuf);
        bytes += zbuf.size();
      }
    });
    std::cout << "encode + zstd level " << level << ": " << z << " ns/record (zstd ~" << z - en
              << "), stored " << bytes / records << " B/record\n";
  }
}
