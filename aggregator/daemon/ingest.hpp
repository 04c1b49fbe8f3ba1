// Agent ingest: a ZeroMQ ROUTER that decodes with limits, stores durably, then acknowledges.
//
// Three stages (see run()): the ingest thread receives messages and sends ACKs; a pool decodes (with limits),
// column-encodes and compresses each message as it arrives (worker_pool.hpp); the committer takes every
// message prepared so far, in arrival order (bounded by count and bytes), applies them in one SQLite
// transaction, commits (one WAL fsync), and only then hands their ACKs back. Malformed frames are answered
// with kRejected and a reason, counted by reason and logged (rate-limited); nothing a peer sends stops the
// loop.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <stop_token>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "auth.hpp"
#include "event_fd.hpp"
#include "live_analysis.hpp"
#include "netprism/wire.hpp"
#include "peer_cut.hpp"
#include "registry.hpp"
#include "settings.hpp"
#include "checkpointer.hpp"
#include "store.hpp"
#include "worker_pool.hpp"

namespace netprism::daemon {

class Ingest {
 public:
  // Binds the listen endpoint (throws zmq::error_t when it cannot). With `auth` enabled the socket is a
  // CURVE server and every message must name the node its key is bound to.
  Ingest(zmq::context_t& ctx, const Settings& s, Registry& reg, LiveAnalysis& live, Auth* auth = nullptr);
  ~Ingest();  // stops the committer if run() did not
  void run(std::stop_token stop);

 private:
  struct Frame {
    zmq::message_t identity;
    zmq::message_t payload;  // released once decoded (size() kept in payload_bytes)
    std::size_t payload_bytes = 0;
    std::size_t parts = 0;  // payload frames received (more than one is malformed; extras are discarded)
    std::string peer;       // the node the sender's key is bound to (ZAP User-Id; "" on plain TCP)
    int fd = -1;            // its connection's socket (ZMQ_SRCFD), to shut it if its key is cut
    // Filled in parallel before the ordered, transactional part:
    wire::DecodeResult decoded;
    std::string compressed;  // the batch as stored (zstd of its column encoding), exactly sized
    store::BatchSpan span;   // of the batch
    bool compress_failed = false;
    std::string_view bytes() const { return {static_cast<const char*>(payload.data()), payload.size()}; }
  };
  struct Reply {  // an ACK for the ingest thread to encode and send
    zmq::message_t identity;
    Ack ack;
  };
  struct Group;
  struct Room {
    std::size_t messages = 0, bytes = 0;     // room left for messages, and for the bytes of small ones
    std::size_t large_pending = 0;           // bytes of large messages in the pipeline (0 or one message)
    std::size_t taken = 0, taken_large = 0;  // bytes received now (small, large)
  };
  // Receives what is queued and fits into the ring (the rest deferred); the number of messages taken.
  std::size_t receive(Room& r);
  bool admit(const Frame& f);                    // within its sender's byte budget?
  bool cuttable(const Frame& f) const;           // a keyed agent's (peer_cut.hpp)
  void note_connection(const Frame& f);          // every message: its connection, for a cut
  void note_deferred(const Frame& f);            // and cuts its key if it floods
  bool admitting(const Frame& f, uint64_t seq);  // false: cut now, defer it
  void cut_peer(const std::string& peer, std::chrono::seconds cooldown);
  void prepare(Frame& f);                                  // decode + encode + compress, on the pool
  std::vector<Reply> process(std::vector<Frame>& frames);  // committer: store, commit; the ACKs to send
  // process(), step by step: one transaction for the group (false: nothing stored), each message's part
  // in it, then what the commit makes true (registry, live analysis) and the counters.
  bool store_group(std::vector<Frame>& frames, Group& g);
  void store_message(Frame& f, Group& g);
  bool impostor(Frame& f, const wire::Message& m, Group& g);
  void store_hello(Frame& f, Hello& h, Group& g);
  void store_batch(Frame& f, Batch& b, Group& g);
  void note_heartbeat(Frame& f, Heartbeat& h, Group& g);
  void reject(Group& g, Frame& f, const std::string& reason, uint64_t epoch = 0, uint64_t seq = 0);
  bool known(const Group& g, const std::string& node, uint64_t epoch) const;
  void apply_committed(Group& g);
  void count_group(std::size_t messages, const Group& g, bool committed);
  void commit_loop();
  void send_acks();
  uint64_t processed();  // messages the committer is done with (answered, or nothing to answer)
  void retention_loop(std::stop_token stop);  // its own thread and connection (ACKs never wait for it)
  void retention(store::Store& st);

  const Settings& s_;
  Registry& reg_;
  LiveAnalysis& live_;
  wire::DecodeLimits limits_;
  bool authenticated_ = false;        // CURVE + ZAP: each frame carries its key's node (Frame::peer)
  store::Store store_;                // the committer's (constructed here, then used by that thread only)
  store::Checkpointer checkpointer_;  // after store_: it hooks store_'s connection and must go first
  zmq::socket_t router_;

  // Per-sender byte budget (Settings::peer_bytes_per_s; ingest thread only): a token bucket per sender, by
  // its key's node (ZAP User-Id) or, on plain TCP, its connection. Checked before a message enters the
  // pipeline, so what is over budget costs no decode.
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  std::unordered_map<std::string, Bucket> buckets_;
  double bucket_rate_ = 0, bucket_size_ = 0;  // bytes/s, bytes
  Auth* auth_ = nullptr;                      // refuses cut keys (with CURVE)
  PeerCut cut_;                               // who floods (ingest thread only)

  // Messages from receipt until their commit: message number n (counted from 0 in arrival order) lives in
  // ring_[n % ring_.size()] while the pool prepares it, until the committer moves it out. The ring has a
  // slot for every message the pipeline may hold at once (its message bound), so a slot is always free
  // again before it is reused.
  std::vector<Frame> ring_;
  uint64_t received_ = 0;             // messages put into the ring (ingest thread)
  uint64_t taken_ = 0;                // messages moved out of the ring (committer)
  std::unique_ptr<WorkerPool> pool_;  // after ring_: its threads use it

  // Committer -> ingest thread: ACKs (wake_ signals them); the pipeline's bounds.
  std::mutex mu_;
  std::size_t pending_messages_ = 0, pending_bytes_ = 0;  // received, not yet committed
  std::size_t pending_large_ = 0;                         // bytes of large messages among them
  std::vector<Reply> acks_;
  std::atomic<bool> draining_{false};
  EventFd wake_;
  std::thread committer_;   // started once everything above exists
  std::jthread retention_;  // last: stopped and joined first
};

}  // namespace netprism::daemon
