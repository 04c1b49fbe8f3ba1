// Exhaustion bounds of the ingest (issue 18) over the real daemon: the registered-node cap, and the
// per-sender byte budget -- a sender over it gets no ACK and nothing decoded (counted as deferred), another
// sender is unaffected, and the deferred batches are stored exactly once when resent.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_sender.hpp"

using namespace netprism;
using namespace netprism::test;
using nlohmann::json;

namespace {

Batch batch_of(const std::string& node, uint64_t epoch, uint64_t seq, std::size_t flowlets) {
  return flowlet_batch(node, epoch, seq,
                       {.src = "10.213.6.1", .dst = "10.213.6.2", .sport = 30000, .flowlets = flowlets});
}

class IngestLimitsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    proc_.reset();
    std::filesystem::remove_all(dir_);
  }
  void start(std::vector<std::string> extra) {
    proc_ = std::make_unique<AggregatorProcess>(NETPRISM_AGGREGATOR_BIN, dir_, free_port(), free_port(),
                                                std::move(extra));
    ASSERT_TRUE(proc_->wait_ready(ctx_)) << "aggregator did not come up";
  }
  json status() {
    auto r = proc_->query(ctx_, {{"cmd", "status"}});
    EXPECT_TRUE(r && r->value("ok", false));
    return r ? (*r)["result"] : json();
  }

  zmq::context_t ctx_;
  std::string dir_ = std::filesystem::temp_directory_path() /
                     ("np_limits_" + std::to_string(::getpid()) + "_" + std::to_string(unix_ns() % 1000000));
  std::unique_ptr<AggregatorProcess> proc_;
};

TEST_F(IngestLimitsTest, NodeCapRefusesNewNodesOnly) {
  start({"--max-nodes", "3"});
  TestSender s(ctx_, proc_->listen());
  for (int i = 0; i < 5; ++i) {
    auto a = s.hello("cap" + std::to_string(i), 1);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->status, i < 3 ? AckStatus::kHelloOk : AckStatus::kRejected) << "node " << i;
    if (i >= 3) {
      EXPECT_NE(a->reason.find("max_nodes"), std::string::npos) << a->reason;
    }
  }
  // A registered node's new epoch (an agent restart) is not a new node.
  auto again = s.hello("cap1", 2);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, AckStatus::kHelloOk);
  auto st = status();
  EXPECT_EQ(st["agents"].size(), 3u) << st.dump();
  EXPECT_EQ(st["ingest"]["nodes_refused"], 2);
  // The cap holds across a restart (registrations persist).
  proc_.reset();
  start({"--max-nodes", "3"});
  TestSender t(ctx_, proc_->listen());
  auto a = t.hello("cap9", 1);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, AckStatus::kRejected);
}

TEST_F(IngestLimitsTest, SenderOverItsByteBudgetIsDeferredNotLost) {
  // Budget: 1 KiB/s, bucket max(1 KiB, 64 KiB + 64 KiB slack) = 128 KiB; each batch here is ~13 KB on the
  // wire, so of a burst of 20 only the first ~10 fit however slowly the daemon reads them (the refill is
  // negligible: no timing in the outcome, also under sanitizers).
  start({"--max-message-bytes", "65536", "--peer-bytes-per-s", "1024"});
  TestSender flood(ctx_, proc_->listen()), other(ctx_, proc_->listen());
  ASSERT_EQ(flood.hello("flood", 1)->status, AckStatus::kHelloOk);
  ASSERT_EQ(other.hello("other", 1)->status, AckStatus::kHelloOk);
  constexpr uint64_t kBatches = 20;
  std::vector<std::string> wire_batches;
  for (uint64_t seq = 0; seq < kBatches; ++seq)
    wire_batches.push_back(wire::encode(batch_of("flood", 1, seq, 150)));
  ASSERT_GT(wire_batches[0].size(), 10000u);
  for (const auto& w : wire_batches) flood.send_raw(w);
  std::set<uint64_t> acked;
  while (auto a = flood.recv_ack(std::chrono::milliseconds(3000))) {
    EXPECT_EQ(a->status, AckStatus::kOk);
    acked.insert(a->seq);
  }
  EXPECT_LE(acked.size(), 11u) << "more than the bucket's worth (128 KiB, ~10 batches) was taken";
  EXPECT_GE(acked.size(), 3u);
  // Another sender has its own budget.
  auto a = other.batch(batch_of("other", 1, 0, 150));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, AckStatus::kOk);
  auto st = status();
  EXPECT_EQ(st["ingest"]["deferred"].get<uint64_t>(), kBatches - acked.size()) << st.dump();
  EXPECT_GT(st["ingest"]["deferred_bytes"].get<uint64_t>(), 0u);
  // The sender still has every batch: resent to the daemon without a budget (same store), each is stored
  // exactly once (the acknowledged ones come back as duplicates).
  proc_.reset();
  start({"--max-message-bytes", "65536", "--peer-bytes-per-s", "0"});
  TestSender again(ctx_, proc_->listen());
  for (uint64_t seq = 0; seq < kBatches; ++seq) {
    again.send_raw(wire_batches[seq]);
    auto r = again.recv_ack(std::chrono::milliseconds(10000));
    ASSERT_TRUE(r) << "seq " << seq << " not answered";
    EXPECT_EQ(r->status, acked.count(seq) ? AckStatus::kDuplicate : AckStatus::kOk) << "seq " << seq;
  }
  st = status();
  for (const auto& ag : st["agents"]) {
    if (ag["node"] == "flood") {
      EXPECT_EQ(ag["records"], kBatches * 150) << "lost or duplicated records";
    }
  }
}

}  // namespace
