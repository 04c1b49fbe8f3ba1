// Cutting a flooding key at the transport (issue 18). A deferred message (over its sender's byte budget, or
// no room in the pipeline) costs no decode, but ZeroMQ has already read and CURVE-decrypted it: on 2 shared
// cores, 8 keyed peers sending maximum-size messages as fast as they are read kept the I/O thread decrypting
// ~130 MB/s that was then dropped, and a legitimate agent's ACK p99 went to 3-12 s (measured at load 9-17,
// deploy.md). Deferral alone cannot stop that: only no longer reading the peer does. So a key whose senders
// keep sending what is not acknowledged is cut: the ZAP handler refuses its key for a cool-down and its live
// connections are shut, so nothing of it is decrypted any more.
//
// Who is cut rests on the protocol, not on rates: an agent is ACK-clocked. It keeps at most `window`
// batches unacknowledged on a connection (agent/delivery.hpp, 16), and a batch that is not answered is
// resent only on a new connection, after its ACK timeout (5 s). So what the daemon holds unanswered from one
// connection of a conforming agent -- its messages still in the pipeline plus every one deferred on it (a
// deferred message is never answered on its connection) -- is at most window x its largest batch: 16 x 4,096
// flowlets x 195 B (the widest encoding) = 12.8 MB, 5.3 MB at the usual ~330 KB, however fast it replays its
// spool (it waits for ACKs, not for the budget). Heartbeats are never answered; they count as answered once
// processed. Thresholds (PeerCutPolicy):
//   - one connection over `conn_bytes` unanswered (default 16 MiB, 1.3x the widest default agent): a sender
//     that keeps sending without waiting for answers. A flood of maximum-size messages is cut at its second
//     message, the first still in the pipeline: what it costs before is one decoded message and the few
//     ZeroMQ had queued;
//   - one key over 4 x conn_bytes deferred within two periods of `period` (5 s, the agents' ACK timeout): a
//     conforming agent opens at most one new connection per ACK timeout, so at most 3 connections' worth
//     (38 MB) fall within 10 s; this catches a flooder that reconnects to reset its per-connection count.
// A key cut again stays cut twice as long as the time before (up to cooldown_max): a persistent flooder
// spends almost all of its time refused; a key cut by mistake (an agent configured with window x batch bytes
// above conn_bytes) loses a cool-down of delay, never data: its spool keeps every batch until acknowledged.
//
// Pure bookkeeping, no sockets (tests/aggregator/peer_cut_test.cpp); the ingest thread owns it and does the
// shutting (ingest.cpp) and the refusing (auth.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace netprism::daemon {

struct PeerCutPolicy {
  uint64_t conn_bytes = 16u << 20;  // deferred on one connection; 0: never cut
  std::chrono::seconds period{5};   // the agents' ACK timeout (agent/delivery.hpp)
  std::chrono::seconds cooldown{60};
  std::chrono::seconds cooldown_max{3600};
};

class PeerCut {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PeerCut(PeerCutPolicy p) : p_(p) {}

  // A message of `bytes` from `peer` (its key's node) on connection `conn` (its ROUTER routing id) was
  // deferred. Returns the cool-down when that makes `peer` a flooder to cut now (the caller refuses its key
  // for that long and shuts its connections), nullopt otherwise.
  std::optional<std::chrono::seconds> deferred(const std::string& conn, const std::string& peer,
                                               std::size_t bytes, Clock::time_point now);
  // Message number `seq` (the ingest's arrival count) of `bytes` from `peer` on `conn` is to enter the
  // pipeline. Returns the cool-down when it would make the connection's unanswered bytes exceed conn_bytes:
  // then the caller defers it and cuts `peer` (it is not counted as deferred here). Otherwise it is counted
  // as unanswered until answered_upto() passes `seq`.
  std::optional<std::chrono::seconds> admitting(const std::string& conn, const std::string& peer,
                                                std::size_t bytes, uint64_t seq, Clock::time_point now);
  // Cut and still in its cool-down: what was queued before its connections were shut is deferred too.
  bool is_cut(const std::string& peer, Clock::time_point now) const;
  // The pipeline has answered (processed) every message numbered below `seq`.
  void answered_upto(uint64_t seq);
  // What the caller keeps per connection (its fd and TCP 4-tuple: ingest.cpp).
  struct ConnInfo {
    int fd = -1;
    std::string tuple;
  };
  // A message of `peer` arrived on `conn`: true the first time (the caller then remember()s its info).
  bool seen(const std::string& conn, const std::string& peer, Clock::time_point now);
  void remember(const std::string& conn, ConnInfo info);
  // The connections of `peer` seen lately (to shut); their records are dropped.
  std::vector<ConnInfo> take_connections(const std::string& peer);
  std::size_t tracked() const { return conns_.size(); }
  uint64_t cuts(const std::string& peer) const;

 private:
  struct Conn {
    std::string peer;
    uint64_t bytes = 0;     // deferred (never answered on this connection)
    uint64_t inflight = 0;  // in the pipeline, not answered yet
    Clock::time_point last;
    ConnInfo info;
  };
  struct Key {
    uint64_t cur = 0, prev = 0;  // deferred bytes in the current and the previous period
    Clock::time_point period_start;
    uint64_t cuts = 0;
    Clock::time_point last, cut_until;
  };
  void sweep(Clock::time_point now);
  std::chrono::seconds cut(Key& k, Clock::time_point now);

  PeerCutPolicy p_;
  std::unordered_map<std::string, Conn> conns_;
  std::unordered_map<std::string, Key> keys_;
  struct InFlight {
    uint64_t seq;
    std::string conn;
    uint64_t bytes;
  };
  std::deque<InFlight> inflight_;  // in arrival order (at most the pipeline's message bound)
  Clock::time_point next_sweep_{};
};

// The connection behind socket `fd` as "LOCAL>PEER" (numeric addresses and ports), or "" when `fd` is not a
// connected TCP socket. `peer_ip` (the message's Peer-Address): "" unless the peer's address is that IP, so a
// number the connection has already given back (and something else has taken) is not recorded as it.
std::string tcp_tuple(int fd, const std::string& peer_ip);
// Shuts the connection (both directions) if `fd` still carries the TCP connection `tuple` (a 4-tuple is not
// reused while its socket or its TIME_WAIT lives); ZeroMQ then sees it end and closes the fd. True if shut.
bool shut_connection(const PeerCut::ConnInfo& c);

}  // namespace netprism::daemon
