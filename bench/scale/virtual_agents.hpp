// Many agents in one process: real DEALER sockets speaking the real wire protocol (HELLO, BATCH with
// epoch/seq, ACK, HEARTBEAT), with resend of unacknowledged batches. Used to stream a simulated cluster into
// an aggregator and to load-test ingest.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "netprism/records.hpp"

namespace netprism::sim {

struct AgentStats {
  uint64_t records_sent = 0;   // records in batches sent at least once
  uint64_t records_acked = 0;  // records in batches acknowledged as stored (ok or duplicate)
  uint64_t batches_sent = 0;
  uint64_t batches_acked = 0;
  uint64_t resends = 0;
  uint64_t rejected = 0;
  uint64_t rehello = 0;
};

// Same as the real agent (agent/delivery.hpp ack_timeout): resending sooner only piles duplicates on a busy
// aggregator.
inline constexpr int kAckTimeoutMs = 5000;

class VirtualAgents {
 public:
  // addrs[i]: agent i's interface address, or several separated by commas (a node with one NIC per GPU).
  VirtualAgents(const std::string& endpoint, std::vector<std::string> nodes, std::vector<std::string> addrs);
  // Queues a batch of flowlets for agent i (sent by pump()).
  void enqueue(size_t agent, std::vector<Flowlet> flowlets);
  // Sends what is queued (bounded window per agent), reads ACKs, resends after `resend_ms`. Returns after
  // `budget_ms` of wall time.
  void pump(int budget_ms, int resend_ms = kAckTimeoutMs);
  void heartbeat_all();
  // Pumps until every queued batch is acknowledged or `timeout_ms` passes; true when all were acknowledged.
  bool drain(int timeout_ms);
  size_t size() const { return agents_.size(); }
  AgentStats stats() const;
  uint64_t unacked_batches() const;
  // Age of the oldest batch not yet acknowledged (0: none): how far behind ingest is, in time.
  int64_t lag_ms() const;
  // Quantile q of the ACK latency (batch sent -> its ACK, ms; the last send of a resent batch), over every
  // batch acknowledged so far; -1 before the first.
  double ack_quantile_ms(double q) const;

 private:
  struct Pending {
    uint64_t seq;
    std::string bytes;
    size_t records;
    int64_t sent_ms;  // -1: not sent yet
    int64_t queued_ms;
  };
  struct Agent {
    std::string node, addr;
    uint64_t epoch = 0, next_seq = 0;
    bool hello_ok = false;
    int64_t hello_sent_ms = -1;
    std::unique_ptr<zmq::socket_t> sock;
    std::vector<Pending> queue;  // unacknowledged, in seq order
  };
  void send_hello(Agent& a, int64_t now);
  void handle(Agent& a, const std::string& msg);
  zmq::context_t ctx_;
  std::vector<Agent> agents_;
  AgentStats stats_;
  std::vector<uint64_t> ack_ms_hist_ = std::vector<uint64_t>(60'001);  // 1 ms buckets, last: >= 60 s
};

int64_t now_ms();
uint64_t now_ns();

}  // namespace netprism::sim
