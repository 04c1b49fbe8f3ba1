#include "delivery.hpp"

#include <algorithm>
#include <set>

#include "clock.hpp"
#include "log.hpp"
#include "netprism/wire.hpp"

namespace netprism::agent {

Delivery::Delivery(zmq::context_t& ctx, DeliveryOptions opts, Spool& spool, HelloFn hello,
                   HeartbeatFn heartbeat)
    : ctx_(ctx),
      opts_(std::move(opts)),
      spool_(spool),
      hello_fn_(std::move(hello)),
      heartbeat_fn_(std::move(heartbeat)),
      backoff_ns_(opts_.backoff_min_ns) {}

Delivery::~Delivery() = default;

int Delivery::fd() const {
  return sock_ ? sock_->get(zmq::sockopt::fd) : -1;
}

uint64_t Delivery::pending_records() const {
  uint64_t n = spool_.records();
  for (const auto& [k, e] : mem_) n += e.records;
  return n;
}

void Delivery::connect(uint64_t now) {
  sock_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
  ++generation_;
  // Everything unacknowledged is ours to resend, so nothing queued inside ZeroMQ is worth waiting for at
  // close: linger 0 keeps shutdown finite.
  sock_->set(zmq::sockopt::linger, 0);
  // ZeroMQ's own reconnect back-off for the TCP connection (our protocol back-off sits above it).
  sock_->set(zmq::sockopt::reconnect_ivl, static_cast<int>(opts_.backoff_min_ns / 1'000'000));
  sock_->set(zmq::sockopt::reconnect_ivl_max, static_cast<int>(opts_.backoff_max_ns / 1'000'000));
  // ZMTP heartbeats detect a dead TCP peer that never sent a FIN/RST (power loss, partition).
  sock_->set(zmq::sockopt::heartbeat_ivl, 1000);
  sock_->set(zmq::sockopt::heartbeat_timeout, 3000);
  // Room for a full window plus HELLO and heartbeats; beyond that we wait for ACKs anyway.
  sock_->set(zmq::sockopt::sndhwm, static_cast<int>(opts_.window * 2 + 16));
  keys::apply_client(sock_->handle(), opts_.curve);
  sock_->connect(opts_.endpoint);
  send_hello(now);
}

void Delivery::send_hello(uint64_t now) {
  Hello h = hello_fn_();
  // The aggregator places a batch only under a (node, epoch) it was introduced to. Batches of earlier runs
  // (from the spool) carry their own epochs, so each of those is introduced first; the current epoch goes
  // last, so the aggregator's view of the node ends on this run. Only the current HELLO's answer is awaited.
  std::set<uint64_t> old;
  const auto& idx = spool_.index();
  for (auto it = idx.begin(); it != idx.end(); it = idx.lower_bound({it->first.epoch + 1, 0}))
    if (it->first.epoch != h.epoch) old.insert(it->first.epoch);
  for (const auto& [k, e] : mem_)
    if (k.epoch != h.epoch) old.insert(k.epoch);
  for (uint64_t e : old) {
    Hello past = h;
    past.epoch = e;
    ++stats_.hellos;
    send_raw(wire::encode(past));
  }
  hello_epoch_ = h.epoch;
  hello_sent_mono_ = now;
  hello_sent_real_ = h.sent_ns;
  ++stats_.hellos;
  send_raw(wire::encode(h));
  state_ = State::kHelloSent;
  // Everything in flight is re-sent after the HELLO is answered.
  inflight_.clear();
}

void Delivery::reconnect(uint64_t now, const std::string& why) {
  ++stats_.reconnects;
  log_warn("delivery: " + why + "; reconnecting to " + opts_.endpoint + " in " +
           std::to_string(backoff_ns_ / 1'000'000) + " ms (" + std::to_string(pending_batches()) +
           " batches unacknowledged, kept)");
  sock_.reset();
  send_refused_since_ns_ = 0;
  inflight_.clear();
  state_ = State::kBackoff;
  next_attempt_ns_ = now + backoff_ns_;
  backoff_ns_ = std::min(backoff_ns_ * 2, opts_.backoff_max_ns);
}

bool Delivery::send_raw(const std::string& bytes) {
  if (!sock_) return false;
  try {
    auto r = sock_->send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    if (!r) {  // high-water mark, or no connection left to send on: try again on a later service()
      if (send_refused_since_ns_ == 0) send_refused_since_ns_ = mono_now_ns();
      return false;
    }
  } catch (const zmq::error_t& e) {
    log_warn(std::string("delivery: send failed: ") + e.what());
    return false;
  }
  last_send_ns_ = mono_now_ns();
  send_refused_since_ns_ = 0;
  return true;
}

void Delivery::submit(BatchKey key, std::string payload, uint32_t records) {
  ++stats_.submitted_batches;
  stats_.submitted_records += records;
  mem_bytes_ += payload.size();
  mem_.emplace(key, MemEntry{std::move(payload), records});
  enforce_mem_bound();
}

void Delivery::enforce_mem_bound() {
  // The oldest leave memory first, so the spool always holds the oldest data and the send order (oldest
  // first, spool before memory) stays the batch order.
  while (mem_bytes_ > opts_.mem_max_bytes && !mem_.empty()) {
    auto it = mem_.begin();
    if (spool_.push(it->first, it->second.payload, it->second.records)) {
      ++stats_.spooled_batches;
      stats_.spooled_records += it->second.records;
    } else if (!spool_.contains(it->first)) {
      // The spool logged and counted a too-large batch; an I/O error we count here.
      stats_.spool_error_records += it->second.records;
      inflight_.erase(it->first);
      attempts_.erase(it->first);
    }
    mem_bytes_ -= it->second.payload.size();
    mem_.erase(it);
  }
}

void Delivery::spool_all() {
  for (auto& [k, e] : mem_) {
    if (spool_.push(k, e.payload, e.records)) {
      ++stats_.spooled_batches;
      stats_.spooled_records += e.records;
    } else if (!spool_.contains(k)) {
      stats_.spool_error_records += e.records;
    }
  }
  mem_.clear();
  mem_bytes_ = 0;
}

uint32_t Delivery::records_of(BatchKey k) const {
  if (auto it = mem_.find(k); it != mem_.end()) return it->second.records;
  if (auto it = spool_.index().find(k); it != spool_.index().end()) return it->second.records;
  return 0;
}

void Delivery::settle(BatchKey k) {
  inflight_.erase(k);
  attempts_.erase(k);
  if (auto it = mem_.find(k); it != mem_.end()) {
    mem_bytes_ -= it->second.payload.size();
    mem_.erase(it);
  }
  spool_.erase(k);
}

std::optional<BatchKey> Delivery::next_unsent() const {
  std::optional<BatchKey> best;
  for (const auto& [k, e] : spool_.index()) {
    if (!inflight_.count(k)) {
      best = k;
      break;
    }
  }
  for (const auto& [k, e] : mem_) {
    if (best && *best < k) break;
    if (!inflight_.count(k)) {
      best = k;
      break;
    }
  }
  return best;
}

void Delivery::fill_window(uint64_t now) {
  while (inflight_.size() < opts_.window) {
    auto k = next_unsent();
    if (!k) break;
    std::string spooled;
    const std::string* bytes = nullptr;
    uint32_t records = 0;
    if (auto it = mem_.find(*k); it != mem_.end()) {
      bytes = &it->second.payload;
      records = it->second.records;
    } else {
      records = records_of(*k);
      auto loaded = spool_.load(*k);
      if (!loaded) continue;  // corrupt: the spool removed and counted it
      spooled = std::move(*loaded);
      bytes = &spooled;
    }
    if (!send_raw(*bytes)) break;
    inflight_[*k] = now;
    uint32_t& n = attempts_[*k];
    if (n == 0) {
      ++stats_.shipped_batches;
      stats_.shipped_records += records;
    } else {
      ++stats_.resent_batches;
    }
    ++n;
  }
}

void Delivery::on_ack(const Ack& a, uint64_t now) {
  BatchKey k{a.epoch, a.seq};
  switch (a.status) {
    case AckStatus::kHelloOk: {
      // Answers to an earlier HELLO, or to the introduction of an earlier run's epoch, need no action.
      if (state_ != State::kHelloSent || a.epoch != hello_epoch_) return;
      state_ = State::kReady;
      backoff_ns_ = opts_.backoff_min_ns;
      ++stats_.hello_oks;
      uint64_t t1_real = real_now_ns();
      stats_.rtt_ns = now - hello_sent_mono_;
      // Offset of the aggregator's clock from ours, assuming a symmetric path (NTP's estimate).
      stats_.clock_offset_ns =
          static_cast<int64_t>(a.server_ns) - static_cast<int64_t>(hello_sent_real_ / 2 + t1_real / 2);
      if (stats_.hello_oks == 1 || stats_.reconnects > 0)
        log_info("delivery: connected to " + opts_.endpoint + " (rtt " +
                 std::to_string(stats_.rtt_ns / 1000) + " us, " + std::to_string(pending_batches()) +
                 " batches to send)");
      return;
    }
    case AckStatus::kOk:
    case AckStatus::kDuplicate: {
      if (!inflight_.count(k) && !mem_.count(k) && !spool_.contains(k)) return;  // already settled
      uint32_t records = records_of(k);
      ++stats_.acked_batches;
      stats_.acked_records += records;
      if (a.status == AckStatus::kDuplicate) ++stats_.duplicate_acks;
      settle(k);
      return;
    }
    case AckStatus::kUnknownNode:
      ++stats_.unknown_node;
      // Replies to batches sent before our new HELLO arrive before its answer: one HELLO is enough.
      if (state_ == State::kHelloSent) return;
      log_warn("delivery: aggregator does not know this node (seq " + std::to_string(a.seq) +
               "); sending HELLO again, then resending");
      send_hello(now);
      return;
    case AckStatus::kRejected: {
      if (!inflight_.count(k) && !mem_.count(k) && !spool_.contains(k)) {
        // Not one of our batches: while waiting for the HELLO answer this is the answer (e.g. a version the
        // aggregator refuses). Say why, and keep retrying with back-off -- the data stays ours meanwhile.
        if (state_ == State::kHelloSent) reconnect(now, "aggregator rejected HELLO: " + a.reason);
        return;
      }
      uint32_t records = records_of(k);
      ++stats_.rejected_batches;
      stats_.rejected_records += records;
      log_error("delivery: aggregator rejected batch epoch=" + std::to_string(a.epoch) +
                " seq=" + std::to_string(a.seq) + " (" + std::to_string(records) + " records): " + a.reason +
                "; not resent (counted as dropped_rejected)");
      settle(k);
      return;
    }
  }
  ++stats_.bad_messages;
  log_warn("delivery: ACK with unknown status " + std::to_string(static_cast<uint32_t>(a.status)));
}

void Delivery::receive(uint64_t now) {
  while (sock_) {
    zmq::message_t msg;
    zmq::recv_result_t r;
    try {
      r = sock_->recv(msg, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      log_warn(std::string("delivery: receive failed: ") + e.what());
      return;
    }
    if (!r) return;
    if (msg.more()) continue;  // a ROUTER may prepend an empty delimiter frame: the reply is the last frame
    auto d = wire::decode(std::string_view(static_cast<const char*>(msg.data()), msg.size()));
    if (!d || d.message->type != MsgType::kAck) {
      ++stats_.bad_messages;
      log_warn("delivery: ignoring a reply that is not an ACK: " + (d ? std::string("wrong type") : d.error));
      continue;
    }
    on_ack(std::get<Ack>(d.message->body), now);
  }
}

void Delivery::service(uint64_t now) {
  if (state_ == State::kBackoff) {
    if (now < next_attempt_ns_) return;
    connect(now);
  }
  receive(now);
  if (state_ == State::kHelloSent) {
    if (now - hello_sent_mono_ > opts_.hello_timeout_ns) reconnect(now, "no answer to HELLO");
    return;
  }
  if (state_ != State::kReady) return;
  // A DEALER can be left with no connection to send on: libzmq ends a connecting session on a protocol error
  // (session_base.cpp engine_error) instead of reconnecting, and every send then returns EAGAIN. With
  // nothing in flight no ACK timeout can fire, so the agent waited forever: AuthTest's agent whose key was
  // cut for flooding made 21,409 refused heartbeat sends and shipped no batch in 120 s (under ASan, 1 run
  // in 3 at load 6). Refused sends for as long as an ACK may take mean the same as a missing ACK.
  if (send_refused_since_ns_ != 0 && now > send_refused_since_ns_ &&
      now - send_refused_since_ns_ > opts_.ack_timeout_ns) {
    reconnect(now, "ZeroMQ refused every send for " + std::to_string(opts_.ack_timeout_ns / 1'000'000) +
                       " ms (no usable connection: refused by the aggregator, or its queue stayed full)");
    return;
  }
  for (const auto& [k, sent] : inflight_) {
    if (now - sent > opts_.ack_timeout_ns) {
      reconnect(now, "no ACK for batch seq " + std::to_string(k.seq) + " within " +
                         std::to_string(opts_.ack_timeout_ns / 1'000'000) + " ms");
      return;
    }
  }
  fill_window(now);
  if (now - last_send_ns_ > opts_.heartbeat_ns && inflight_.empty()) {
    if (send_raw(wire::encode(heartbeat_fn_()))) ++stats_.heartbeats;  // sent ones only: refused ones retry
  }
}

}  // namespace netprism::agent
