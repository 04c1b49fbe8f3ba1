#include "ingest.hpp"

#include <malloc.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <system_error>

#include "log.hpp"
#include "batch_codec.hpp"
#include "netprism/wire.hpp"

namespace netprism::daemon {

namespace {
// A drained group is bounded so one commit stays short (ACK latency) and memory stays bounded:
// 8192 messages or 16 MiB, whichever comes first. The message bound is what a large cluster meets first:
// 1,000 agents sending every 100 ms are 10,000 small batches/s, and every commit rewrites the index pages
// of every node it touches (the batches' node-keyed indexes), so a commit should carry several batches per
// node. At 1,024 messages a commit held about one batch per node and the WAL took ~150 MB/s of page
// rewrites for ~4 MB/s of data; 8,192 small batches are still only a few MiB, committed in tens of ms.
// The byte bound is also the latency bound of a small batch queued behind large ones (everything in the
// pipeline is committed in arrival order): at most kGroupBytes plus one message are ahead of it. At 64 MiB
// the exhaustion test's legitimate agent waited seconds behind hostile 16 MiB batches (p50 1.8 s, the
// daemon prepared ~180 MiB/s of them on 2 busy cores); 16 MiB (~0.2 s of them) is still hundreds of
// ordinary batches (bench/ingest's 8 x 16 in flight are ~2 MB), so it costs throughput nothing.
constexpr std::size_t kGroupMessages = 8192;
constexpr std::size_t kGroupBytes = 16u << 20;
// Large messages (over 1 MiB: agents' default batches are ~330 KB) enter the pipeline one at a time, beside
// the kGroupBytes of the others; one that finds another large one in it is deferred. ZeroMQ takes turns
// between senders by message, not by byte: without this, one sender's 16 MiB messages took the whole room at
// every turn and the exhaustion test's legitimate agent waited seconds for its ACKs. So a small batch has
// at most one large message ahead of it (plus kGroupBytes of small ones), and any legal message still gets
// in.
constexpr std::size_t kLargeMessage = 1u << 20;
// Retention runs every 30 s (its own thread and connection: ACKs never wait for it): frequent enough that
// the size bound is overshot by at most 30 s of ingest, rare enough that its scans cost nothing measurable.
constexpr auto kRetentionEvery = std::chrono::seconds(30);
// Rejections are logged at most 10 lines/s (the rest are counted; see `netprism status`).
constexpr int kRejectLogPerSecond = 10;
// Frames up to this much above max_message_bytes are still received, to be answered with a reason; larger
// ones make ZeroMQ drop the connection before it allocates them.
constexpr int64_t kOversizeSlack = 64 << 10;
// What ZeroMQ may queue per peer before this daemon reads it, in bytes: its receive high-water mark counts
// messages, so it is set to this over the largest message (at least 2). With the default 16 MiB messages: 2
// queued + 1 being received = 48 MiB per peer at most, whatever the peer sends.
constexpr int64_t kPeerQueueBytes = 32 << 20;
// Senders' buckets are forgotten once full again (an idle sender starts full anyway); checked when there are
// more than this many, so the map stays bounded by the senders active within about a second.
constexpr std::size_t kBucketsSweepAbove = 4096;
}  // namespace

Ingest::Ingest(zmq::context_t& ctx, const Settings& s, Registry& reg, LiveAnalysis& live, Auth* auth)
    : s_(s),
      reg_(reg),
      live_(live),
      store_(s.data_dir, store::Db::Mode::kReadWrite, static_cast<int>(s.zstd_level)),
      checkpointer_(store_.db(), store::Store::resolve(s.data_dir)),
      router_(ctx, zmq::socket_type::router),
      auth_(auth),
      cut_(PeerCutPolicy{.conn_bytes = static_cast<uint64_t>(s.peer_cut_bytes),
                         .cooldown = std::chrono::seconds(s.peer_cut_s)}),
      ring_(kGroupMessages) {
  limits_.max_message_bytes = static_cast<std::size_t>(s.max_message_bytes);
  // Batch bytes go to segment files (store/segment_log.hpp). Retention frees space a segment at a time, so
  // with a size bound a segment is at most a sixteenth of it (the bound then holds within ~6 %).
  uint64_t segment_bytes = 64u << 20;
  if (s.retention_bytes > 0)
    segment_bytes =
        std::clamp<uint64_t>(static_cast<uint64_t>(s.retention_bytes) / 16, 1u << 20, segment_bytes);
  store_.enable_segments(segment_bytes);
  // Every group allocates and frees its messages, decoded records and compressed copies (a few MB at
  // ingest rates); glibc's defaults hand that memory back to the kernel after each group (heap trim above
  // 128 KiB free, mmap for large blocks) and fault it in again, zero-filled, for the next one -- ~20 page
  // faults per batch, a visible share of the daemon's CPU. Keep freed memory up to two full groups
  // (2 x kGroupBytes, the most the pipeline holds at once) and serve blocks below 16 MiB from the heap.
  // Process-wide, but the ingest path is what allocates at this rate.
  ::mallopt(M_MMAP_THRESHOLD, 16 << 20);
  ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(2 * kGroupBytes));
  router_.set(zmq::sockopt::linger, 1000);  // finite: shutdown never hangs on a vanished agent
  // ZeroMQ drops a peer that sends a larger frame before allocating it (the largest legal batch plus a
  // little, so that frames just above our limit are still answered with a reason and counted), and queues
  // at most kPeerQueueBytes of a peer's messages.
  router_.set(zmq::sockopt::maxmsgsize, s.max_message_bytes + kOversizeSlack);
  router_.set(zmq::sockopt::rcvhwm,
              static_cast<int>(std::clamp<int64_t>(kPeerQueueBytes / s.max_message_bytes, 2, 1000)));
  bucket_rate_ = static_cast<double>(s.peer_bytes_per_s);
  bucket_size_ = std::max(bucket_rate_, static_cast<double>(s.max_message_bytes + kOversizeSlack));
  // ROUTER silently drops what exceeds a peer's send high-water mark. One group can answer up to
  // kGroupMessages messages of one peer at once, so the default (1000) could drop ACKs of a burst; 16 groups
  // of slack keep every ACK for any peer that reads them, while a peer that never reads costs at most
  // 16 Ki small ACKs of memory.
  router_.set(zmq::sockopt::sndhwm, static_cast<int>(16 * kGroupMessages));
  if (auth) auth->secure(router_, kIngestDomain);
  authenticated_ = auth && auth->enabled();
  router_.bind(s.listen);
  // Every decode/compress thread is a pool thread now (the ingest thread only moves messages).
  pool_ = std::make_unique<WorkerPool>(static_cast<std::size_t>(std::max<int64_t>(s.ingest_threads, 1)),
                                       [this](uint64_t seq) { prepare(ring_[seq % ring_.size()]); });
  committer_ = std::thread([this] { commit_loop(); });
  retention_ = std::jthread([this](std::stop_token st) { retention_loop(st); });
}

Ingest::~Ingest() {
  if (committer_.joinable()) {
    draining_ = true;
    pool_->poke();
    committer_.join();
  }
}

void Ingest::run(std::stop_token stop) {
  ::pthread_setname_np(::pthread_self(), "np-ingest");  // names show in top -H / perf: who spends what
  // This thread only moves messages: it receives each one into the ring and hands it to the pool at once,
  // and sends ACKs as soon as the committer hands them over (it never waits on a decode or a commit, so an
  // ACK leaves right after the commit that made its batch durable). The pool prepares messages while the
  // committer's previous commit waits on the disk, and the next commit takes everything prepared
  // meanwhile, in arrival order.
  while (!stop.stop_requested()) {
    Room r;
    {
      std::lock_guard lk(mu_);
      r.messages = kGroupMessages - pending_messages_;
      r.bytes = pending_bytes_ < kGroupBytes ? kGroupBytes - pending_bytes_ : 0;
      r.large_pending = pending_large_;
    }
    const bool room = r.messages > 0 && r.bytes > 0;
    // Without room, only the committer's wake-up is waited for: messages stay in ZeroMQ's queues (bounded
    // by its high-water marks), so memory stays bounded by the pipeline's bounds however fast agents send.
    zmq::pollitem_t items[] = {{router_.handle(), 0, static_cast<short>(room ? ZMQ_POLLIN : 0), 0},
                               {nullptr, wake_.fd(), ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, std::chrono::milliseconds(100));
    if (items[1].revents & ZMQ_POLLIN) {
      wake_.clear();
      send_acks();
    }
    // What the committer has processed -- every ACK just sent included -- no longer counts as unanswered.
    cut_.answered_upto(processed());
    // Everything queued now (within the bounds), handed to the pool in one go: one wake-up per burst
    // rather than per message (context switches are a visible cost on a busy machine).
    const std::size_t n = room ? receive(r) : 0;
    if (n == 0) continue;
    {
      std::lock_guard lk(mu_);  // counted before the committer can see them
      pending_messages_ += n;
      pending_bytes_ += r.taken;
      pending_large_ += r.taken_large;
    }
    received_ += n;
    pool_->submit(n);
  }
  // Stop: the committer commits what was received, then ends; its last ACKs go out before the socket closes.
  draining_ = true;
  pool_->poke();
  committer_.join();
  send_acks();
}

std::size_t Ingest::receive(Room& r) {
  static RateLimitedLog defer_log(1);
  std::map<std::string, std::pair<uint64_t, uint64_t>> deferred;  // sender -> messages, bytes
  std::size_t n = 0;
  while (n < r.messages && r.taken < r.bytes) {
    Frame& f = ring_[(received_ + n) % ring_.size()];
    f = Frame{};  // the committer moved the slot's last message out
    if (!router_.recv(f.identity, zmq::recv_flags::dontwait)) break;
    // A ROUTER message is identity + payload frames; read every frame so the next message starts clean.
    while (router_.get(zmq::sockopt::rcvmore)) {
      zmq::message_t part;
      (void)router_.recv(part, zmq::recv_flags::none);
      if (++f.parts == 1) {
        if (authenticated_) {
          f.peer = peer_user(part);
          // Deprecated in libzmq but kept (Debian 12's 4.3.4 fills it from every message's metadata); should
          // a libzmq return -1, a cut key is still refused from its next connection, just not shut at once.
          f.fd = zmq_msg_get(part.handle(), ZMQ_SRCFD);
        }
        f.payload = std::move(part);
      }
    }
    f.payload_bytes = f.payload.size();
    note_connection(f);
    // dropped here, before any decode; the sender still has it and resends
    const bool large = f.payload_bytes > kLargeMessage;
    const bool fits = (large ? r.large_pending + r.taken_large == 0 : r.taken + f.payload_bytes <= r.bytes);
    bool cut = false;  // its sender is cut now (peer_cut.hpp): deferred, whatever the room
    if (!fits || !admit(f) || (cut = !admitting(f, received_ + n))) {
      auto& d = deferred[f.peer];
      d.first++;
      d.second += f.payload_bytes;
      if (!cut) note_deferred(f);
      continue;
    }
    (large ? r.taken_large : r.taken) += f.payload_bytes;
    ++n;
  }
  for (const auto& [peer, d] : deferred) {
    reg_.count_deferred(peer, d.first, d.second);
    defer_log.log(
        "deferred " + std::to_string(d.first) + " message(s) of " +
        (peer.empty() ? std::string("a plain-TCP sender") : "'" + peer + "'") +
        " (over its byte budget, peer_bytes_per_s, or no room for its size); not acknowledged, to be resent");
  }
  return n;
}

bool Ingest::admit(const Frame& f) {
  if (bucket_rate_ <= 0) return true;
  const auto now = std::chrono::steady_clock::now();
  if (buckets_.size() > kBucketsSweepAbove)
    std::erase_if(buckets_, [&](const auto& kv) {
      const auto& b = kv.second;
      return b.tokens + bucket_rate_ * std::chrono::duration<double>(now - b.last).count() >= bucket_size_;
    });
  std::string key = authenticated_ ? f.peer : f.identity.to_string();
  auto [it, fresh] = buckets_.try_emplace(std::move(key), Bucket{bucket_size_, now});
  Bucket& b = it->second;
  if (!fresh) {
    b.tokens =
        std::min(bucket_size_, b.tokens + bucket_rate_ * std::chrono::duration<double>(now - b.last).count());
    b.last = now;
  }
  const auto need = static_cast<double>(f.payload_bytes);
  if (b.tokens < need) return false;
  b.tokens -= need;
  return true;
}

uint64_t Ingest::processed() {
  std::lock_guard lk(mu_);
  return received_ - pending_messages_;
}

void Ingest::send_acks() {
  std::vector<Reply> acks;
  {
    std::lock_guard lk(mu_);
    acks.swap(acks_);
  }
  for (auto& r : acks) {
    // A vanished peer makes these sends fail or drop (ROUTER discards what it cannot route); the agent then
    // resends and gets kDuplicate, so nothing is lost.
    if (!router_.send(r.identity, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) continue;
    // Encoded here rather than by the committer: it is on the critical path (every commit's ACKs wait for
    // it), this thread mostly waits in poll().
    (void)router_.send(zmq::buffer(wire::encode(r.ack)), zmq::send_flags::dontwait);
  }
}

void Ingest::commit_loop() {
  ::pthread_setname_np(::pthread_self(), "np-commit");
  // SQLite's page cache (cache_size, store.cpp) fills this thread's arena page by page.
  reserve_thread_heap(48u << 20);
  static const std::atomic<bool> kNever{false};
  for (;;) {
    // Draining: everything received is committed before this thread ends (the ingest thread has stopped
    // receiving by then).
    const bool draining = draining_;
    uint64_t ready =
        pool_->wait_ready(taken_, draining ? std::chrono::milliseconds(10) : std::chrono::seconds(1),
                          draining ? kNever : draining_);
    if (ready == taken_) {
      if (draining && taken_ == pool_->submitted()) return;
      continue;
    }
    const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(ready - taken_, kGroupMessages));
    std::vector<Frame> group;
    group.reserve(n);
    std::size_t bytes = 0, large = 0;
    for (std::size_t i = 0; i < n; ++i) {
      group.push_back(std::move(ring_[(taken_ + i) % ring_.size()]));
      const std::size_t b = group.back().payload_bytes;
      (b > kLargeMessage ? large : bytes) += b;
    }
    taken_ += n;
    auto replies = process(group);
    {
      std::lock_guard lk(mu_);
      for (auto& r : replies) acks_.push_back(std::move(r));
      pending_messages_ -= n;
      pending_bytes_ -= bytes;
      pending_large_ -= large;
    }
    wake_.signal();
  }
}

void Ingest::prepare(Frame& f) {
  // Decode and compress one message (pure per-message work; the rest stays in order in process()).
  if (f.parts != 1) return;
  f.decoded = wire::decode(f.bytes(), limits_);
  // Nothing reads the message bytes after the decode (the decoded copy holds every field): released now
  // rather than after the commit, so the ZeroMQ I/O thread's next messages reuse memory still in cache
  // (held to the commit, the messages in flight cycled through ~3 MB, more than a core's L2).
  f.payload = zmq::message_t();
  if (f.decoded && f.decoded.message->type == MsgType::kBatch) {
    // Stored column-encoded (batch_codec.hpp), from the batch just decoded: smaller and several times
    // cheaper to compress than the wire bytes. Compressed into a per-thread buffer and copied out exactly
    // sized: after the commit the same bytes go to the live analysis, which holds them until its next pass.
    auto& b = std::get<Batch>(f.decoded.message->body);
    thread_local std::string scratch, zbuf;  // per pool thread, reused across batches
    f.compress_failed = !store::compress_stored(b, static_cast<int>(s_.zstd_level), zbuf, scratch);
    if (!f.compress_failed) f.compressed.assign(zbuf);
    f.span = store::span_of(b);
    // Nothing reads the decoded flowlets past this point: the store and then the live analysis take the
    // compressed copy (~18 B per flowlet instead of 112). Freed here, their memory is what this thread's
    // next decode reuses, warm. Held until the analysis' next pass (up to a second of ingest), every
    // decode wrote to fresh pages: ~20 % of the decode threads' CPU went to page faults.
    std::vector<Flowlet>().swap(b.flowlets);
  }
}

// One group on its way through the committer: the replies to send and what the commit makes true.
struct Ingest::Group {
  uint64_t now = 0;
  struct Pending {
    Frame* frame;
    Ack ack;
    bool needs_commit;  // only sent if the transaction committed
  };
  struct Applied {  // registry/analysis updates that wait for the commit
    std::optional<Hello> hello;
    std::string seen_node;  // a batch or heartbeat from this known node
    uint64_t sent_ns = 0;
    const Counters* counters = nullptr;  // in the group's decoded message (alive until process() returns)
    uint64_t records = 0;                // newly stored records
    std::string stored;                  // a newly stored batch as stored, for the live analysis
    uint64_t analysis_records = 0;       // flowlets in it
    bool heartbeat = false;
    bool fresh = false;  // a batch stored now (not a duplicate)
  };
  std::vector<Pending> replies;
  std::vector<Applied> applied;
  std::set<std::pair<std::string, uint64_t>> hello_here;  // registered earlier in this same group
  std::set<std::string> new_nodes;                        // nodes this group registers for the first time
  // The nodes table is updated once per node per group (not once per message): records add up, the
  // latest counters win, last_seen is this group's time either way -- the same end state, in the same
  // transaction, for a fraction of the UPDATEs and counter serialisations.
  struct Touch {
    uint64_t records = 0;
    const Counters* counters = nullptr;  // points into the group's decoded messages
  };
  std::map<std::string, Touch> touches;
  uint64_t dups = 0, unknown = 0, group_bytes = 0;
  uint64_t stored = 0, records = 0;  // batches and records stored, once committed
};

std::vector<Ingest::Reply> Ingest::process(std::vector<Frame>& frames) {
  Group g;
  g.now = now_unix_ns();
  const bool committed = store_group(frames, g);
  if (committed) apply_committed(g);
  count_group(frames.size(), g, committed);
  std::vector<Reply> out;
  out.reserve(g.replies.size());
  for (auto& r : g.replies)
    if (!r.needs_commit || committed) out.push_back({std::move(r.frame->identity), std::move(r.ack)});
  return out;
}

bool Ingest::store_group(std::vector<Frame>& frames, Group& g) {
  try {
    store::Transaction tx(store_.db());
    for (auto& f : frames) store_message(f, g);
    for (const auto& [node, t] : g.touches)
      store_.touch_node(node, g.now, t.records, t.counters, std::nullopt);
    store_.commit(tx);
  } catch (const std::exception& e) {
    // Nothing of this group is stored: no ACK goes out, so the agents resend (their batches wait for ACKs).
    if (auto line = reg_.on_commit(false, e.what(), frames.size(), g.now); !line.empty()) log_line(line);
    return false;
  }
  if (auto line = reg_.on_commit(true, "", 0, g.now); !line.empty()) log_line(line);
  return true;
}

void Ingest::reject(Group& g, Frame& f, const std::string& reason, uint64_t epoch, uint64_t seq) {
  static RateLimitedLog reject_log(kRejectLogPerSecond);
  reg_.count_reject(reason);
  reject_log.log("rejected a message (" + std::to_string(f.payload_bytes) + " bytes): " + reason);
  g.replies.push_back({&f, Ack{epoch, seq, AckStatus::kRejected, reason, g.now}, false});
}

bool Ingest::known(const Group& g, const std::string& node, uint64_t epoch) const {
  return g.hello_here.count({node, epoch}) || reg_.known(node, epoch);
}

void Ingest::store_message(Frame& f, Group& g) {
  if (f.parts != 1) return reject(g, f, "expected one payload frame, got " + std::to_string(f.parts));
  auto& d = f.decoded;
  if (!d) return reject(g, f, d.error);
  if (impostor(f, *d.message, g)) return;
  switch (d.message->type) {
    case MsgType::kHello:
      return store_hello(f, std::get<Hello>(d.message->body), g);
    case MsgType::kBatch:
      return store_batch(f, std::get<Batch>(d.message->body), g);
    case MsgType::kHeartbeat:
      return note_heartbeat(f, std::get<Heartbeat>(d.message->body), g);
    case MsgType::kAck:
      return reject(g, f, "unexpected message type ack from an agent");
  }
}

// A key writes for its own node only: a HELLO, batch or heartbeat naming another node is refused (counted
// under this reason), nothing of it stored. Plain TCP (--insecure) has no key to hold it to.
bool Ingest::impostor(Frame& f, const wire::Message& m, Group& g) {
  if (!authenticated_) return false;
  std::string node;
  uint64_t epoch = 0, seq = 0;
  if (const auto* h = std::get_if<Hello>(&m.body)) {
    node = h->node;
    epoch = h->epoch;
  } else if (const auto* b = std::get_if<Batch>(&m.body)) {
    node = b->node;
    epoch = b->epoch;
    seq = b->seq;
  } else if (const auto* hb = std::get_if<Heartbeat>(&m.body)) {
    node = hb->node;
    epoch = hb->epoch;
  } else {
    return false;
  }
  if (f.peer == node || (f.peer == kCollectorUser && collector_node(node))) return false;
  reject(g, f, "node not allowed for this key", epoch, seq);
  return true;
}

void Ingest::store_hello(Frame& f, Hello& h, Group& g) {
  // The registered-node cap: a HELLO of a node not registered yet (here or earlier in this group) is refused
  // once there are max_nodes; the agent retries with back-off, its data stays with it.
  if (s_.max_nodes > 0 && !reg_.has_node(h.node) && !g.new_nodes.count(h.node)) {
    if (reg_.node_count() + g.new_nodes.size() >= static_cast<std::size_t>(s_.max_nodes)) {
      reg_.with_counters([](IngestCounters& c) { c.nodes_refused++; });
      return reject(g, f, "registered node cap reached (max_nodes " + std::to_string(s_.max_nodes) + ")",
                    h.epoch);
    }
    g.new_nodes.insert(h.node);
  }
  store_.register_node(h, g.now);
  g.hello_here.emplace(h.node, h.epoch);
  g.replies.push_back({&f, Ack{h.epoch, 0, AckStatus::kHelloOk, "", now_unix_ns()}, true});
  g.applied.push_back({});
  g.applied.back().hello = std::move(h);
}

void Ingest::store_batch(Frame& f, Batch& b, Group& g) {
  if (!known(g, b.node, b.epoch)) {
    g.unknown++;
    g.replies.push_back(
        {&f,
         Ack{b.epoch, b.seq, AckStatus::kUnknownNode,
             "unknown node '" + b.node + "' epoch " + std::to_string(b.epoch) + ": send HELLO, then resend",
             g.now},
         false});
    return;
  }
  if (f.compress_failed) throw store::SqliteError("zstd compression failed");
  bool fresh = store_.insert_compressed(b, f.span, f.compressed, f.payload_bytes, g.now);
  uint64_t records = fresh ? f.span.records : 0;
  auto& t = g.touches[b.node];
  t.records += records;
  t.counters = &b.counters;
  if (!fresh) g.dups++;
  if (fresh) g.group_bytes += f.compressed.size();
  g.replies.push_back(
      {&f, Ack{b.epoch, b.seq, fresh ? AckStatus::kOk : AckStatus::kDuplicate, "", now_unix_ns()}, true});
  Group::Applied a;
  a.seen_node = b.node;
  a.sent_ns = b.sent_ns;
  a.counters = &b.counters;
  a.records = records;
  a.fresh = fresh;
  if (fresh) {
    a.stored = std::move(f.compressed);  // the statement that bound it has been reset
    a.analysis_records = f.span.records;
  }
  g.applied.push_back(std::move(a));
}

void Ingest::note_heartbeat(Frame& f, Heartbeat& h, Group& g) {
  if (!known(g, h.node, h.epoch)) {
    // Heartbeats carry no seq; seq 0 with kUnknownNode only makes the agent introduce itself again.
    g.unknown++;
    g.replies.push_back(
        {&f, Ack{h.epoch, 0, AckStatus::kUnknownNode, "unknown node '" + h.node + "': send HELLO", g.now},
         false});
    return;
  }
  g.touches[h.node].counters = &h.counters;
  g.applied.emplace_back();
  g.applied.back().seen_node = h.node;
  g.applied.back().sent_ns = h.sent_ns;
  g.applied.back().counters = &h.counters;
  g.applied.back().heartbeat = true;
}

void Ingest::apply_committed(Group& g) {
  for (auto& a : g.applied) {
    if (a.hello) {
      reg_.on_hello(*a.hello, g.now);
      log_line("agent '" + a.hello->node + "' registered (epoch " + std::to_string(a.hello->epoch) +
               ", version " + a.hello->agent_version + ")");
    } else {
      reg_.on_seen(a.seen_node, a.sent_ns, g.now, a.counters, a.records);
      if (a.heartbeat) continue;
      if (a.fresh) g.stored++;
      g.records += a.records;
      // Batches of RDMA agents also when they hold no flowlets: their QP table reads end RoCE flows.
      if (a.analysis_records > 0 || (a.fresh && a.counters && a.counters->count("rdma_qp_table_read_ns")))
        live_.feed(std::move(a.stored), a.analysis_records);
    }
  }
}

void Ingest::count_group(std::size_t messages, const Group& g, bool committed) {
  reg_.with_counters([&](IngestCounters& c) {
    c.messages += messages;
    c.batches_stored += g.stored;
    c.records_stored += g.records;
    c.store_batches += g.stored;
    c.store_bytes += committed ? g.group_bytes : 0;
    c.duplicates += committed ? g.dups : 0;
    c.unknown_node += g.unknown;
    for (auto& a : g.applied)
      if (a.heartbeat && committed) c.heartbeats++;
  });
}

void Ingest::retention_loop(std::stop_token stop) {
  ::pthread_setname_np(::pthread_self(), "np-retention");
  // Ingest first (agents wait for its ACKs), as for the analysis thread: nice 10, so on a busy machine a
  // pass takes the CPU ingest leaves, and runs longer instead (bench/ingest/retention_ack_bench).
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10) != 0)
    log_line("retention: could not lower its priority; it competes with ingest for the CPU");
  std::unique_ptr<store::Store> st;
  // First pass right at start: bounds changed in the config apply at once, not 30 s later.
  auto next = std::chrono::steady_clock::now();
  while (!stop.stop_requested()) {
    if (std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    next = std::chrono::steady_clock::now() + kRetentionEvery;
    try {
      if (!st) {
        // Unsynced commits: a deletion lost to a power cut is redone by the next pass, and its ~1,000 WAL
        // syncs per 300,000 batches deleted no longer queue with the committer's (retention_ack_bench).
        st = std::make_unique<store::Store>(s_.data_dir, store::Db::Mode::kReadWrite, 1, false);
        st->enable_retention();
      }
      retention(*st);
    } catch (const std::exception& e) {
      log_line(std::string("retention failed (will retry): ") + e.what());
    }
  }
}

void Ingest::retention(store::Store& st) {
  uint64_t min_received = 0;
  if (s_.retention_age_s > 0) {
    uint64_t age = static_cast<uint64_t>(s_.retention_age_s) * 1000000000ull;
    uint64_t now = now_unix_ns();
    min_received = now > age ? now - age : 0;
  }
  uint64_t current = 0;
  reg_.with_counters([&](IngestCounters& c) { current = c.store_bytes; });
  auto r = st.apply_retention(min_received, static_cast<uint64_t>(s_.retention_bytes), current);
  if (r.deleted_batches == 0) return;
  // Subtracted, not set: the committer kept adding to the totals while this pass ran.
  uint64_t left = 0;
  reg_.with_counters([&](IngestCounters& c) {
    c.retention_deleted += r.deleted_batches;
    c.store_batches -= std::min(c.store_batches, r.deleted_batches);
    c.store_bytes -= std::min(c.store_bytes, r.freed_bytes);
    left = c.store_bytes;
  });
  log_line("retention deleted " + std::to_string(r.deleted_batches) + " batches; " + std::to_string(left) +
           " compressed bytes remain");
}

}  // namespace netprism::daemon
