// Agent ingest: a ZeroMQ ROUTER that decodes with limits, stores durably, then acknowledges.
//
// Group commit: every wake-up drains what is queued (bounded by count and bytes), applies it in one SQLite
// transaction, commits (one WAL fsync), and only then sends the ACKs. Malformed frames are answered with
// kRejected and a reason, counted by reason and logged (rate-limited); nothing a peer sends stops the loop.
#pragma once

#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "live_analysis.hpp"
#include "registry.hpp"
#include "settings.hpp"
#include "checkpointer.hpp"
#include "store.hpp"
#include "worker_pool.hpp"

namespace netprism::daemon {

// A Linux eventfd: the committer thread wakes the ingest thread's zmq::poll() with it.
class EventFd {
 public:
  EventFd();
  ~EventFd();
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  int fd() const { return fd_; }
  void signal();
  void clear();

 private:
  int fd_;
};

class Ingest {
 public:
  // Binds the listen endpoint (throws zmq::error_t when it cannot).
  Ingest(zmq::context_t& ctx, const Settings& s, Registry& reg, LiveAnalysis& live);
  ~Ingest();  // stops the committer if run() did not
  void run(std::stop_token stop);

 private:
  struct Frame;
  struct Reply {  // an ACK for the ingest thread to send
    zmq::message_t identity;
    std::string ack;
  };
  void prepare(std::vector<Frame>& group);                // decode + encode + compress, on the pool
  std::vector<Reply> process(std::vector<Frame>& group);  // committer: store, commit; the ACKs to send
  void commit_loop();
  void send_acks();
  void retention();

  const Settings& s_;
  Registry& reg_;
  LiveAnalysis& live_;
  store::Store store_;                // the committer's (constructed here, then used by that thread only)
  store::Checkpointer checkpointer_;  // after store_: it hooks store_'s connection and must go first
  zmq::socket_t router_;
  std::unique_ptr<WorkerPool> pool_;

  // Ingest thread -> committer: prepared frames; committer -> ingest thread: ACKs (wake_ signals them).
  std::mutex mu_;
  std::condition_variable commit_cv_;
  std::vector<Frame> queued_;
  std::size_t pending_messages_ = 0, pending_bytes_ = 0;  // queued or being committed
  std::vector<Reply> acks_;
  bool draining_ = false;
  EventFd wake_;
  std::thread committer_;  // last: started once everything above exists
};

}  // namespace netprism::daemon
