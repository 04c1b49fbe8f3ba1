// Delivery that loses nothing (contracts.md, "Delivery guarantees"): a ZeroMQ DEALER to the aggregator's
// ROUTER. Every batch has a key (epoch, seq) and stays ours until the aggregator ACKs it (stored or
// duplicate). Unacknowledged batches wait in memory up to a bound, beyond it in the disk spool; both are
// resent after a reconnect. The only losses are the spool's drop-oldest-when-full and batches the aggregator
// rejects as malformed, both counted and logged.
//
// Protocol states: HELLO sent -> (HELLO ok) -> ready. In ready, up to `window` batches are in flight. An ACK
// "unknown node" sends HELLO again and resends everything not acknowledged. Silence (no HELLO answer, or an
// in-flight batch unacknowledged for ack_timeout) tears the socket down and reconnects with exponential
// back-off; heartbeats keep an idle connection visibly alive to the aggregator.
//
// Single-threaded: the owner calls service() when fd() is readable and on its timer ticks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "netprism/keys.hpp"
#include "netprism/records.hpp"
#include "spool.hpp"

namespace netprism::agent {

struct DeliveryOptions {
  std::string endpoint;
  // CURVE: our key pair and the aggregator's pinned public key (empty: plain TCP). A server without the
  // matching secret key fails the handshake, so it can never ACK (and make us drop) anything.
  keys::ClientCurve curve;
  // Unacknowledged bytes kept in memory before the oldest move to the spool. 64 MiB holds ~10 s of a very
  // busy node's flowlets (~80 wire bytes each at 100k records/s) -- enough to ride out an aggregator restart
  // without touching the disk, small next to a GPU node's memory.
  uint64_t mem_max_bytes = 64ull << 20;
  // Batches in flight before waiting for ACKs: enough to keep a WAN round trip busy at ~10 batches/s without
  // letting one slow aggregator commit hold much data in the send path.
  uint32_t window = 16;
  // No ACK for an in-flight batch this long -> presume the aggregator gone and reconnect. Far above a
  // durable commit (tens of ms) on a loaded host; a false alarm costs only a duplicate the aggregator drops.
  uint64_t ack_timeout_ns = 5'000'000'000ull;
  uint64_t hello_timeout_ns = 2'000'000'000ull;  // HELLO is answered without touching the disk
  uint64_t heartbeat_ns = 1'000'000'000ull;    // idle keep-alive: the aggregator's "connected" needs a pulse
  uint64_t backoff_min_ns = 100'000'000ull;    // first reconnect attempt after 100 ms ...
  uint64_t backoff_max_ns = 5'000'000'000ull;  // ... doubling up to 5 s, so a long outage costs little
};

struct DeliveryStats {
  uint64_t submitted_batches = 0, submitted_records = 0;
  uint64_t shipped_batches = 0, shipped_records = 0;  // sent at least once
  uint64_t resent_batches = 0;
  uint64_t acked_batches = 0, acked_records = 0;  // ACK ok or duplicate
  uint64_t duplicate_acks = 0;
  uint64_t spooled_batches = 0, spooled_records = 0;  // ever written to the spool
  uint64_t rejected_batches = 0, rejected_records = 0;
  uint64_t spool_error_records = 0;  // could not be spooled (I/O error): lost, counted
  uint64_t unknown_node = 0;         // "unknown node" answers (each followed by a new HELLO)
  uint64_t hellos = 0, hello_oks = 0, reconnects = 0, heartbeats = 0;
  uint64_t bad_messages = 0;    // undecodable replies
  int64_t clock_offset_ns = 0;  // aggregator clock - agent clock, from the last HELLO round trip
  uint64_t rtt_ns = 0;
};

class Delivery {
 public:
  using HelloFn = std::function<Hello()>;
  using HeartbeatFn = std::function<Heartbeat()>;
  using MonoFn = std::function<uint64_t()>;

  Delivery(zmq::context_t& ctx, DeliveryOptions opts, Spool& spool, HelloFn hello, HeartbeatFn heartbeat);
  ~Delivery();

  // Takes a batch encoded for the wire. Never blocks; never drops (beyond the spool's bound).
  void submit(BatchKey key, std::string payload, uint32_t records);
  // Receives replies, runs timers, sends what the window allows. `now` is CLOCK_MONOTONIC ns.
  void service(uint64_t now);
  // Readable when the socket may have something (ZMQ_FD semantics: check again after every service()).
  int fd() const;
  // Changes whenever the socket is re-created (its fd number may be reused, so the number alone is not
  // enough).
  uint64_t socket_generation() const { return generation_; }

  bool ready() const { return state_ == State::kReady; }
  bool idle() const { return mem_.empty() && spool_.count() == 0; }
  std::size_t pending_batches() const { return mem_.size() + spool_.count(); }
  uint64_t pending_records() const;
  uint64_t mem_bytes() const { return mem_bytes_; }
  // Shutdown: everything still unacknowledged in memory goes to the spool for the next run.
  void spool_all();
  const DeliveryStats& stats() const { return stats_; }

 private:
  enum class State { kBackoff, kHelloSent, kReady };
  struct MemEntry {
    std::string payload;
    uint32_t records = 0;
  };

  void connect(uint64_t now);
  void send_hello(uint64_t now);
  void reconnect(uint64_t now, const std::string& why);
  bool send_raw(const std::string& bytes);
  void receive(uint64_t now);
  void on_ack(const Ack& a, uint64_t now);
  void fill_window(uint64_t now);
  std::optional<BatchKey> next_unsent() const;
  void settle(BatchKey k);
  void enforce_mem_bound();
  uint32_t records_of(BatchKey k) const;

  zmq::context_t& ctx_;
  DeliveryOptions opts_;
  Spool& spool_;
  HelloFn hello_fn_;
  HeartbeatFn heartbeat_fn_;
  std::unique_ptr<zmq::socket_t> sock_;

  State state_ = State::kBackoff;
  uint64_t next_attempt_ns_ = 0;
  uint64_t backoff_ns_ = 0;
  uint64_t generation_ = 0;
  uint64_t hello_epoch_ = 0;
  uint64_t hello_sent_mono_ = 0;
  uint64_t hello_sent_real_ = 0;
  uint64_t last_send_ns_ = 0;
  uint64_t send_refused_since_ns_ = 0;  // the first of the sends refused in a row (0: the last one went out)

  std::map<BatchKey, MemEntry> mem_;
  uint64_t mem_bytes_ = 0;
  std::map<BatchKey, uint64_t> inflight_;  // key -> monotonic send time
  std::map<BatchKey, uint32_t> attempts_;  // key -> sends so far (erased on ACK)
  DeliveryStats stats_;
};

}  // namespace netprism::agent
