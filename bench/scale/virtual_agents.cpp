#include "virtual_agents.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "netprism/version.hpp"
#include "netprism/wire.hpp"

namespace netprism::sim {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

namespace {
// Batches in flight per agent: the real agent's window (agent/delivery.hpp, window = 16), so the load test
// sees the same pipelining a real fleet would.
constexpr size_t kWindow = 16;
}  // namespace

VirtualAgents::VirtualAgents(const std::string& endpoint, std::vector<std::string> nodes,
                             std::vector<std::string> addrs)
    : ctx_(1) {
  ctx_.set(zmq::ctxopt::max_sockets, static_cast<int>(nodes.size()) + 64);
  agents_.resize(nodes.size());
  uint64_t epoch = now_ns();
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto& a = agents_[i];
    a.node = nodes[i];
    a.addr = addrs[i];
    a.epoch = epoch + i;
    a.sock = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
    a.sock->set(zmq::sockopt::linger, 1000);
    a.sock->set(zmq::sockopt::sndhwm, 0);
    a.sock->set(zmq::sockopt::rcvhwm, 0);
    a.sock->connect(endpoint);
  }
}

void VirtualAgents::enqueue(size_t i, std::vector<Flowlet> flowlets) {
  auto& a = agents_.at(i);
  Batch b;
  b.node = a.node;
  b.epoch = a.epoch;
  b.seq = a.next_seq++;
  b.sent_ns = now_ns();
  b.counters = {{"captured", a.next_seq}};
  size_t n = flowlets.size();
  b.flowlets = std::move(flowlets);
  a.queue.push_back({b.seq, wire::encode(b), n, -1, now_ms()});
}

void VirtualAgents::send_hello(Agent& a, int64_t now) {
  Hello h;
  h.node = a.node;
  h.agent_version = std::string(kVersion) + "-sim";
  h.epoch = a.epoch;
  std::vector<std::string> addrs;
  for (size_t from = 0; from <= a.addr.size();) {
    size_t comma = std::min(a.addr.find(',', from), a.addr.size());
    addrs.push_back(a.addr.substr(from, comma - from));
    from = comma + 1;
  }
  h.interfaces = {{"sim0", 1, addrs}};
  h.sent_ns = now_ns();
  a.sock->send(zmq::buffer(wire::encode(h)), zmq::send_flags::dontwait);
  a.hello_sent_ms = now;
}

void VirtualAgents::handle(Agent& a, const std::string& msg) {
  auto r = wire::decode(msg);
  if (!r || r.message->type != MsgType::kAck) return;
  const auto& ack = std::get<Ack>(r.message->body);
  switch (ack.status) {
    case AckStatus::kHelloOk:
      a.hello_ok = true;
      break;
    case AckStatus::kUnknownNode:
      // The aggregator lost us: introduce ourselves again and resend everything unacknowledged.
      a.hello_ok = false;
      a.hello_sent_ms = -1;
      for (auto& p : a.queue) p.sent_ms = -1;
      ++stats_.rehello;
      break;
    case AckStatus::kOk:
    case AckStatus::kDuplicate:
    case AckStatus::kRejected:
      for (auto it = a.queue.begin(); it != a.queue.end(); ++it) {
        if (it->seq != ack.seq || ack.epoch != a.epoch) continue;
        if (ack.status == AckStatus::kRejected) {
          ++stats_.rejected;
        } else {
          ++stats_.batches_acked;
          stats_.records_acked += it->records;
          if (it->sent_ms >= 0)
            ++ack_ms_hist_[static_cast<size_t>(std::clamp<int64_t>(now_ms() - it->sent_ms, 0, 60'000))];
        }
        a.queue.erase(it);
        break;
      }
      break;
  }
}

void VirtualAgents::pump(int budget_ms, int resend_ms) {
  int64_t until = now_ms() + budget_ms;
  std::vector<zmq::pollitem_t> items(agents_.size());
  do {
    int64_t now = now_ms();
    for (size_t i = 0; i < agents_.size(); ++i) {
      auto& a = agents_[i];
      if (!a.hello_ok) {
        if (a.hello_sent_ms < 0 || now - a.hello_sent_ms > resend_ms) send_hello(a, now);
        continue;
      }
      for (size_t k = 0; k < a.queue.size() && k < kWindow; ++k) {
        auto& p = a.queue[k];
        if (p.sent_ms >= 0 && now - p.sent_ms < resend_ms) continue;
        if (!a.sock->send(zmq::buffer(p.bytes), zmq::send_flags::dontwait)) break;
        if (p.sent_ms < 0) {
          ++stats_.batches_sent;
          stats_.records_sent += p.records;
        } else {
          ++stats_.resends;
        }
        p.sent_ms = now;
      }
    }
    for (size_t i = 0; i < agents_.size(); ++i) items[i] = {agents_[i].sock->handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(items.data(), items.size(),
              std::chrono::milliseconds(std::max<int64_t>(0, std::min<int64_t>(10, until - now))));
    for (size_t i = 0; i < agents_.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      zmq::message_t m;
      while (agents_[i].sock->recv(m, zmq::recv_flags::dontwait)) handle(agents_[i], m.to_string());
    }
  } while (now_ms() < until);
}

void VirtualAgents::heartbeat_all() {
  for (auto& a : agents_) {
    if (!a.hello_ok) continue;
    Heartbeat h{a.node, a.epoch, now_ns(), {{"captured", a.next_seq}}};
    a.sock->send(zmq::buffer(wire::encode(h)), zmq::send_flags::dontwait);
  }
}

bool VirtualAgents::drain(int timeout_ms) {
  int64_t until = now_ms() + timeout_ms;
  while (unacked_batches() > 0 && now_ms() < until) pump(100);
  return unacked_batches() == 0;
}

AgentStats VirtualAgents::stats() const {
  return stats_;
}

int64_t VirtualAgents::lag_ms() const {
  int64_t oldest = -1;
  for (const auto& a : agents_)
    if (!a.queue.empty() && (oldest < 0 || a.queue.front().queued_ms < oldest))
      oldest = a.queue.front().queued_ms;
  return oldest < 0 ? 0 : now_ms() - oldest;
}

double VirtualAgents::ack_quantile_ms(double q) const {
  uint64_t total = 0;
  for (uint64_t c : ack_ms_hist_) total += c;
  if (total == 0) return -1;
  uint64_t need = static_cast<uint64_t>(q * static_cast<double>(total)), seen = 0;
  for (size_t ms = 0; ms < ack_ms_hist_.size(); ++ms)
    if ((seen += ack_ms_hist_[ms]) > need) return static_cast<double>(ms);
  return static_cast<double>(ack_ms_hist_.size() - 1);
}

uint64_t VirtualAgents::unacked_batches() const {
  uint64_t n = 0;
  for (const auto& a : agents_) n += a.queue.size();
  return n;
}

}  // namespace netprism::sim
