// A minimal aggregator for the agent tests: a real ZeroMQ ROUTER that speaks the wire protocol the way
// netprism-aggregator does (HELLO -> HELLO ok; BATCH placed by (node, epoch) -> ok / duplicate / unknown
// node), with switches for the failure modes an aggregator can show.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "clock.hpp"
#include "netprism/wire.hpp"

namespace netprism::test {

using namespace netprism;

class TestAggregator {
 public:
  explicit TestAggregator(zmq::context_t& ctx, std::string endpoint = "tcp://127.0.0.1:*") : ctx_(ctx) {
    bind(endpoint);
  }
  void bind(const std::string& endpoint) {
    sock_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::router);
    sock_->set(zmq::sockopt::linger, 0);
    sock_->bind(endpoint);
    endpoint_ = sock_->get(zmq::sockopt::last_endpoint);
  }
  void close() { sock_.reset(); }  // like a SIGKILL: the socket vanishes, its queues with it
  const std::string& endpoint() const { return endpoint_; }

  // Answers everything that arrives within `ms`.
  void pump(int ms) {
    if (!sock_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return;
    }
    zmq::pollitem_t it{sock_->handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&it, 1, std::chrono::milliseconds(ms));
    for (;;) {
      zmq::message_t id, msg;
      if (!sock_->recv(id, zmq::recv_flags::dontwait)) return;
      do {
        (void)sock_->recv(msg);  // the rest of a multipart message is already here
      } while (msg.more());
      auto d = wire::decode(std::string_view(static_cast<const char*>(msg.data()), msg.size()));
      ASSERT_TRUE(d) << d.error;
      Ack a;
      a.server_ns = agent::real_now_ns();
      if (d.message->type == MsgType::kHello) {
        const auto& h = std::get<Hello>(d.message->body);
        ++hellos;
        known.insert({h.node, h.epoch});  // like the real aggregator: batches are placed by (node, epoch)
        hello_epochs.push_back(h.epoch);
        a.epoch = h.epoch;
        a.status = AckStatus::kHelloOk;
        if (reject_hello) {
          a.epoch = 0;  // the aggregator's rejections of what it cannot place carry no batch key
          a.status = AckStatus::kRejected;
          a.reason = "agent version not supported";
        }
      } else if (d.message->type == MsgType::kBatch) {
        const auto& b = std::get<Batch>(d.message->body);
        ++batches_received;
        a.epoch = b.epoch;
        a.seq = b.seq;
        if (silent) continue;
        if (!known.count({b.node, b.epoch})) {
          a.status = AckStatus::kUnknownNode;
        } else if (reject_seq && *reject_seq == b.seq) {
          a.status = AckStatus::kRejected;
          a.reason = "test rejects this one";
        } else if (stored.insert({b.epoch, b.seq}).second) {
          a.status = AckStatus::kOk;
          records += b.flowlets.size();
          if (keep_batches) batches.push_back(b);
        } else {
          a.status = AckStatus::kDuplicate;
        }
      } else {
        ++heartbeats;
        continue;  // heartbeats are not answered
      }
      if (silent) continue;
      std::string out = wire::encode(a);
      sock_->send(id, zmq::send_flags::sndmore);
      sock_->send(zmq::buffer(out));
    }
  }

  std::set<std::pair<uint64_t, uint64_t>> stored;
  std::set<std::pair<std::string, uint64_t>> known;
  std::vector<uint64_t> hello_epochs;
  uint64_t records = 0, hellos = 0, heartbeats = 0, batches_received = 0;
  bool keep_batches = false;
  std::vector<Batch> batches;  // stored batches, when keep_batches
  bool silent = false;
  bool reject_hello = false;
  std::optional<uint64_t> reject_seq;

 private:
  zmq::context_t& ctx_;
  std::unique_ptr<zmq::socket_t> sock_;
  std::string endpoint_;
};

}  // namespace netprism::test
