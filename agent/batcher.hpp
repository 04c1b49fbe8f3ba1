// Batching: records accumulate into one Batch until it holds `max_records` or its oldest record has waited
// `flush_interval` -- whichever comes first -- so the aggregator sees data within ~100 ms and one message
// never grows past a size the wire codec and a ZeroMQ frame handle comfortably.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "netprism/records.hpp"

namespace netprism::agent {

struct BatcherOptions {
  // 4096 flowlets are ~330 KB on the wire: large enough to amortise one ACK and one durable commit per
  // batch, far below the decoder's 64 MiB / 1M-element limits.
  uint32_t max_records = 4096;
  uint64_t flush_interval_ns = 100'000'000ull;  // the latency target: ~100 ms to the aggregator
};

class Batcher {
 public:
  Batcher(std::string node, uint64_t epoch, BatcherOptions opts)
      : node_(std::move(node)), epoch_(epoch), opts_(opts) {}

  void add(const Flowlet& f, uint64_t now) {
    touch(now);
    cur_.flowlets.push_back(f);
  }
  void add(const RdmaCounterSample& s, uint64_t now) {
    touch(now);
    cur_.rdma_samples.push_back(s);
  }
  void add(const RdmaPortBurst& b, uint64_t now) {
    touch(now);
    cur_.rdma_bursts.push_back(b);
  }
  void add(const QpEntry& q, uint64_t now) {
    touch(now);
    cur_.qps.push_back(q);
  }

  std::size_t records() const {
    return cur_.flowlets.size() + cur_.rdma_samples.size() + cur_.rdma_bursts.size() + cur_.qps.size();
  }
  bool full() const { return records() >= opts_.max_records; }
  // Due: full, or non-empty and the oldest record has waited the flush interval.
  bool due(uint64_t now) const {
    return full() || (records() > 0 && now - first_ns_ >= opts_.flush_interval_ns);
  }

  // Seals the current batch with the next sequence number (seq counts from 0 per epoch, gap-free).
  Batch seal(uint64_t sent_realtime_ns, Counters counters) {
    Batch b = std::move(cur_);
    cur_ = Batch{};
    b.node = node_;
    b.epoch = epoch_;
    b.seq = next_seq_++;
    b.sent_ns = sent_realtime_ns;
    b.counters = std::move(counters);
    return b;
  }

  void set_flush_interval(uint64_t ns) { opts_.flush_interval_ns = ns; }
  uint64_t flush_interval() const { return opts_.flush_interval_ns; }
  uint64_t next_seq() const { return next_seq_; }
  uint64_t epoch() const { return epoch_; }

 private:
  void touch(uint64_t now) {
    if (records() == 0) first_ns_ = now;
  }
  std::string node_;
  uint64_t epoch_;
  BatcherOptions opts_;
  Batch cur_;
  uint64_t first_ns_ = 0;
  uint64_t next_seq_ = 0;
};

}  // namespace netprism::agent
