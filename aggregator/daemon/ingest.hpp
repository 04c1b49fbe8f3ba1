// Agent ingest: a ZeroMQ ROUTER that decodes with limits, stores durably, then acknowledges.
//
// Group commit: every wake-up drains what is queued (bounded by count and bytes), applies it in one SQLite
// transaction, commits (one WAL fsync), and only then sends the ACKs. Malformed frames are answered with
// kRejected and a reason, counted by reason and logged (rate-limited); nothing a peer sends stops the loop.
#pragma once

#include <stop_token>

#include <zmq.hpp>

#include "live_analysis.hpp"
#include "registry.hpp"
#include "settings.hpp"
#include "checkpointer.hpp"
#include "store.hpp"
#include "worker_pool.hpp"

namespace netprism::daemon {

class Ingest {
 public:
  // Binds the listen endpoint (throws zmq::error_t when it cannot).
  Ingest(zmq::context_t& ctx, const Settings& s, Registry& reg, LiveAnalysis& live);
  void run(std::stop_token stop);

 private:
  struct Frame;
  void prepare(std::vector<Frame>& group);  // starts decode + compression on the pool
  void process(std::vector<Frame>& group);  // prepared (pool finished): store, commit, then ACK
  void retention();

  const Settings& s_;
  Registry& reg_;
  LiveAnalysis& live_;
  store::Store store_;
  store::Checkpointer checkpointer_;  // after store_: it hooks store_'s connection and must go first
  zmq::socket_t router_;
  std::unique_ptr<WorkerPool> pool_;
};

}  // namespace netprism::daemon
