// Hostile input against a running netprism-aggregator over real ZeroMQ: every bad frame is answered with
// kRejected and counted, unknown senders are asked to HELLO again, valid agents are unaffected, the daemon
// does not crash and its memory stays bounded.
#include <gtest/gtest.h>

#include <filesystem>
#include <msgpack.hpp>
#include <random>

#include "test_sender.hpp"

using namespace netprism;
using namespace netprism::test;
using nlohmann::json;

namespace {

std::string tmpdir(const char* what) {
  auto p =
      std::filesystem::temp_directory_path() / (std::string("np_") + what + "_" + std::to_string(::getpid()) +
                                                "_" + std::to_string(unix_ns() % 1000000));
  std::filesystem::create_directories(p);
  return p;
}

Batch one_batch(const std::string& node, uint64_t epoch, uint64_t seq, uint16_t sport = 40000) {
  Batch b = flowlet_batch(node, epoch, seq, {.src = "10.213.5.1", .dst = "10.213.5.2", .sport = sport});
  b.counters = {{"captured", seq + 1}};
  return b;
}

class AggregatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmpdir("aggr");
    start();
  }
  void TearDown() override {
    proc_.reset();
    std::filesystem::remove_all(dir_);
  }
  void start() {
    proc_ = std::make_unique<AggregatorProcess>(NETPRISM_AGGREGATOR_BIN, dir_, listen_port_, query_port_);
    ASSERT_TRUE(proc_->wait_ready(ctx_)) << "aggregator did not come up";
  }
  json status() {
    auto r = proc_->query(ctx_, {{"cmd", "status"}});
    EXPECT_TRUE(r && r->value("ok", false));
    return r ? (*r)["result"] : json();
  }
  uint64_t rejected() { return status()["ingest"]["rejected"].get<uint64_t>(); }
  // Sends raw bytes and expects kRejected with a reason.
  void expect_rejected(const std::string& bytes, const char* what) {
    TestSender s(ctx_, proc_->listen());
    s.send_raw(bytes);
    auto a = s.recv_ack();
    ASSERT_TRUE(a) << what << ": no answer";
    EXPECT_EQ(a->status, AckStatus::kRejected) << what;
    EXPECT_FALSE(a->reason.empty()) << what;
  }

  zmq::context_t ctx_;
  std::string dir_;
  int listen_port_ = free_port();
  int query_port_ = free_port();
  std::unique_ptr<AggregatorProcess> proc_;
};

TEST_F(AggregatorTest, HelloBatchDuplicateAndStatus) {
  TestSender s(ctx_, proc_->listen());
  auto h = s.hello("n1", 7, {"10.213.5.1"});
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, AckStatus::kHelloOk);
  auto a = s.batch(one_batch("n1", 7, 0));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, AckStatus::kOk);
  EXPECT_EQ(a->seq, 0u);
  EXPECT_GT(a->server_ns, 0u);
  auto d = s.batch(one_batch("n1", 7, 0));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, AckStatus::kDuplicate);
  auto st = status();
  ASSERT_EQ(st["agents"].size(), 1u);
  EXPECT_EQ(st["agents"][0]["node"], "n1");
  EXPECT_EQ(st["agents"][0]["connected"], true);
  EXPECT_EQ(st["agents"][0]["records"], 1);  // the duplicate was not stored twice
  EXPECT_EQ(st["records_total"], 1);
  EXPECT_EQ(st["agents"][0]["counters"]["captured"], 1);
  EXPECT_TRUE(st["agents"][0]["clock_offset_ns"].is_number_integer());
  EXPECT_EQ(st["agents"][0]["clock"]["source"], "chrony");
  auto flows = proc_->query(ctx_, {{"cmd", "flows"}});
  ASSERT_TRUE(flows);
  ASSERT_EQ((*flows)["result"]["flows"].size(), 1u);
  EXPECT_EQ((*flows)["result"]["flows"][0]["packets"], 10);
  EXPECT_EQ((*flows)["result"]["flows"][0]["src"], "10.213.5.1");
}

TEST_F(AggregatorTest, UnknownNodeAndUnknownEpochAreAskedToHelloAgain) {
  TestSender s(ctx_, proc_->listen());
  auto a = s.batch(one_batch("stranger", 1, 3));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, AckStatus::kUnknownNode);
  EXPECT_EQ(a->seq, 3u);
  ASSERT_EQ(s.hello("stranger", 1)->status, AckStatus::kHelloOk);
  EXPECT_EQ(s.batch(one_batch("stranger", 2, 0))->status, AckStatus::kUnknownNode);  // epoch never introduced
  EXPECT_EQ(s.batch(one_batch("stranger", 1, 3))->status, AckStatus::kOk);           // resent after HELLO
  EXPECT_GE(status()["ingest"]["unknown_node"].get<uint64_t>(), 2u);
}

TEST_F(AggregatorTest, MalformedFramesAreRejectedWithReasonAndCounted) {
  std::string valid = wire::encode(one_batch("n1", 1, 0));
  expect_rejected(valid.substr(0, valid.size() / 2), "truncated msgpack");
  expect_rejected("", "empty frame");
  expect_rejected(std::string("\xc1", 1), "reserved msgpack byte");
  {  // wrong types: node as an integer, seq as a string
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(buf);
    pk.pack_array(3);
    pk.pack(kWireSchemaVersion);
    pk.pack(static_cast<uint32_t>(MsgType::kBatch));
    pk.pack_array(9);
    pk.pack(42);
    pk.pack(1);
    pk.pack("seven");
    pk.pack(0);
    for (int i = 0; i < 4; ++i) pk.pack_array(0);
    pk.pack_map(0);
    expect_rejected(std::string(buf.data(), buf.size()), "wrong types");
  }
  // Oversized headers: an array32 declaring 4 billion elements, a str32 declaring 4 GiB.
  expect_rejected(std::string("\x93\x01\x02\xdd\xff\xff\xff\xff", 8), "huge array header");
  expect_rejected(std::string("\x93\x01\x02\xdb\xff\xff\xff\xf0xx", 10), "huge string header");
  {  // unknown schema version
    std::string m = wire::encode(one_batch("n1", 1, 0));
    m[1] = 0x63;  // positive fixint 99 instead of the version
    expect_rejected(m, "unknown schema version");
  }
  {  // an ACK is not something an agent sends
    expect_rejected(wire::encode(Ack{1, 1, AckStatus::kOk, "", 0}), "ack from agent");
  }
  {  // two payload frames
    TestSender s(ctx_, proc_->listen());
    s.send_parts({wire::encode(one_batch("n1", 1, 0)), "extra"});
    auto a = s.recv_ack();
    ASSERT_TRUE(a);
    EXPECT_EQ(a->status, AckStatus::kRejected);
  }
  auto st = status();
  EXPECT_EQ(st["ingest"]["rejected"], 9);
  EXPECT_FALSE(st["ingest"]["rejected_by_reason"].empty());
  EXPECT_TRUE(proc_->alive());
}

TEST_F(AggregatorTest, TenThousandGarbageFramesAllRejectedValidSenderUnaffected) {
  TestSender good(ctx_, proc_->listen());
  ASSERT_EQ(good.hello("good", 1, {"10.213.5.1"})->status, AckStatus::kHelloOk);
  long rss_before = proc_->rss_kib();

  constexpr int kGarbage = 10000;
  std::thread flood([&] {
    TestSender bad(ctx_, proc_->listen());
    std::mt19937 rng(12345);
    std::string valid = wire::encode(one_batch("good", 1, 0));
    int answered = 0;
    for (int i = 0; i < kGarbage; ++i) {
      std::string g;
      switch (i % 4) {
        case 0:  // random bytes
          g.resize(1 + rng() % 512);
          for (auto& c : g) c = static_cast<char>(rng());
          break;
        case 1:  // truncated valid message
          g = valid.substr(0, 1 + rng() % (valid.size() - 1));
          break;
        case 2:  // valid prefix, random flips
          g = valid;
          for (int k = 0; k < 4; ++k) g[rng() % g.size()] = static_cast<char>(rng());
          if (wire::decode(g)) g.back() ^= 0x5a, g += "\x01";
          break;
        case 3:  // huge declared sizes
          g = std::string("\x93\x01\x02\xdd", 4) + std::string(4, static_cast<char>(0xf0 | (rng() & 0xf)));
          break;
      }
      bad.send_raw(g);
      // Read replies as we go so neither side's queue fills (the flood is answered, not silently dropped).
      while (bad.recv_ack(std::chrono::milliseconds(0))) ++answered;
    }
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (answered < kGarbage && std::chrono::steady_clock::now() < end)
      if (bad.recv_ack(std::chrono::milliseconds(200))) ++answered;
    EXPECT_EQ(answered, kGarbage);
  });
  // Meanwhile the valid agent keeps shipping; each batch is acknowledged as stored.
  for (uint64_t seq = 0; seq < 50; ++seq) {
    auto a = good.batch(one_batch("good", 1, seq, static_cast<uint16_t>(40000 + seq)));
    ASSERT_TRUE(a) << "valid sender starved at seq " << seq;
    EXPECT_EQ(a->status, AckStatus::kOk);
  }
  flood.join();
  auto st = status();
  EXPECT_EQ(st["ingest"]["rejected"].get<uint64_t>(), static_cast<uint64_t>(kGarbage));
  EXPECT_EQ(st["records_total"], 50);
  EXPECT_TRUE(proc_->alive());
  long rss_after = proc_->rss_kib();
  // Bounded memory: 10,000 rejected frames must not leave more than 32 MiB behind (each frame is < 1 KiB, so
  // anything kept per frame would show; allocator caches and SQLite's page cache account for the slack).
  EXPECT_LT(rss_after - rss_before, 32 * 1024)
      << "RSS grew from " << rss_before << " to " << rss_after << " KiB";
}

TEST_F(AggregatorTest, OversizedMessageIsRejected) {
  proc_.reset();
  proc_ = std::make_unique<AggregatorProcess>(NETPRISM_AGGREGATOR_BIN, dir_, listen_port_, query_port_,
                                              std::vector<std::string>{"--max-message-bytes", "65536"});
  ASSERT_TRUE(proc_->wait_ready(ctx_));
  TestSender s(ctx_, proc_->listen());
  s.send_raw(std::string(100000, '\x90'));
  auto a = s.recv_ack();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, AckStatus::kRejected);
  EXPECT_NE(a->reason.find("limit"), std::string::npos) << a->reason;
}

// Query bounds (issue 18): `flows` returns at most --query-max-rows rows (largest first, marked truncated),
// whatever limit the client asks for.
TEST_F(AggregatorTest, FlowsRowsBoundedByTheServer) {
  proc_.reset();
  proc_ = std::make_unique<AggregatorProcess>(NETPRISM_AGGREGATOR_BIN, dir_, listen_port_, query_port_,
                                              std::vector<std::string>{"--query-max-rows", "2"});
  ASSERT_TRUE(proc_->wait_ready(ctx_));
  TestSender s(ctx_, proc_->listen());
  ASSERT_EQ(s.hello("n1", 5, {"10.213.5.1"})->status, AckStatus::kHelloOk);
  for (uint16_t i = 0; i < 4; ++i)
    ASSERT_EQ(s.batch(one_batch("n1", 5, i, static_cast<uint16_t>(41000 + i)))->status, AckStatus::kOk);
  for (uint64_t limit : {0, 3, 1}) {
    auto r = proc_->query(ctx_, {{"cmd", "flows"}, {"limit", limit}});
    ASSERT_TRUE(r && r->value("ok", false)) << (r ? r->dump() : "no answer");
    const auto& res = (*r)["result"];
    EXPECT_EQ(res["flows"].size(), limit == 1 ? 1u : 2u) << "limit " << limit;
    EXPECT_TRUE(res["truncated"].get<bool>());
    EXPECT_EQ(res["total_flows"], 4);
  }
}

TEST_F(AggregatorTest, RegistrationsAndBatchesSurviveRestart) {
  {
    TestSender s(ctx_, proc_->listen());
    ASSERT_EQ(s.hello("n1", 5, {"10.213.5.1"})->status, AckStatus::kHelloOk);
    ASSERT_EQ(s.batch(one_batch("n1", 5, 0))->status, AckStatus::kOk);
  }
  proc_.reset();
  start();
  TestSender s(ctx_, proc_->listen());
  // Known without a new HELLO, and the old batch is still a duplicate.
  EXPECT_EQ(s.batch(one_batch("n1", 5, 0))->status, AckStatus::kDuplicate);
  EXPECT_EQ(s.batch(one_batch("n1", 5, 1, 40001))->status, AckStatus::kOk);
  auto st = status();
  EXPECT_EQ(st["agents"][0]["records"], 2);
  EXPECT_EQ(st["agents"][0]["interfaces"][0]["addrs"][0], "10.213.5.1");
}

// `connected` follows the configured timeout (agents heard from recently).
TEST_F(AggregatorTest, ConnectedGoesFalseAfterTheTimeout) {
  proc_.reset();
  proc_ = std::make_unique<AggregatorProcess>(NETPRISM_AGGREGATOR_BIN, dir_, listen_port_, query_port_,
                                              std::vector<std::string>{"--connected-timeout-s", "1"});
  ASSERT_TRUE(proc_->wait_ready(ctx_));
  TestSender s(ctx_, proc_->listen());
  ASSERT_EQ(s.hello("c", 1)->status, AckStatus::kHelloOk);
  EXPECT_EQ(status()["agents"][0]["connected"], true);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(status()["agents"][0]["connected"], false);
  Heartbeat hb{"c", 1, unix_ns(), {{"captured", 5}}};
  s.send_raw(wire::encode(hb));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto st = status();
  EXPECT_EQ(st["agents"][0]["connected"], true) << "a heartbeat counts as heard from";
  EXPECT_EQ(st["agents"][0]["counters"]["captured"], 5);
}

// Retention by age and by size (applied at start-up, then every 30 s), both by receive time: the age of a
// batch is how long ago the aggregator stored it, whatever the agent's clock says.
TEST_F(AggregatorTest, RetentionByAgeAndSize) {
  {
    TestSender s(ctx_, proc_->listen());
    ASSERT_EQ(s.hello("r", 1)->status, AckStatus::kHelloOk);
    Batch old = one_batch("r", 1, 0);
    old.flowlets[0].first_ns += 7200ull * 1000000000ull;  // an agent clock two hours ahead: looks new
    old.flowlets[0].last_ns += 7200ull * 1000000000ull;
    ASSERT_EQ(s.batch(old)->status, AckStatus::kOk);
    std::this_thread::sleep_for(std::chrono::milliseconds(4000));  // received 4 s before the others
    for (uint64_t seq = 1; seq <= 10; ++seq) {
      Batch b = one_batch("r", 1, seq, static_cast<uint16_t>(40000 + seq));
      b.flowlets[0].first_ns += seq * 1000000;  // distinct, increasing times
      b.flowlets[0].last_ns += seq * 1000000;
      if (seq == 1) {  // an agent clock two hours behind: looks old
        b.flowlets[0].first_ns -= 7200ull * 1000000000ull;
        b.flowlets[0].last_ns -= 7200ull * 1000000000ull;
      }
      ASSERT_EQ(s.batch(b)->status, AckStatus::kOk);
    }
  }
  auto st = status();
  ASSERT_EQ(st["store"]["batches"], 11);
  uint64_t bytes = st["store"]["compressed_bytes"];
  proc_.reset();
  proc_ = std::make_unique<AggregatorProcess>(NETPRISM_AGGREGATOR_BIN, dir_, listen_port_, query_port_,
                                              std::vector<std::string>{"--retention-age-s", "3"});
  ASSERT_TRUE(proc_->wait_ready(ctx_));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  st = status();
  EXPECT_EQ(st["store"]["batches"], 10) << "only the batch received 4 s ago should be gone";
  EXPECT_EQ(st["ingest"]["retention_deleted_batches"], 1);
  {
    TestSender s(ctx_, proc_->listen());
    ASSERT_EQ(s.hello("r", 1)->status, AckStatus::kHelloOk);
    EXPECT_EQ(s.batch(one_batch("r", 1, 0))->status, AckStatus::kDuplicate)
        << "a resend of the deleted batch is still recognised";
  }
  EXPECT_EQ(status()["store"]["batches"], 10);
  // Size: keep about half of what is there; the oldest go first.
  proc_.reset();
  proc_ = std::make_unique<AggregatorProcess>(
      NETPRISM_AGGREGATOR_BIN, dir_, listen_port_, query_port_,
      std::vector<std::string>{"--retention-bytes", std::to_string(bytes / 2)});
  ASSERT_TRUE(proc_->wait_ready(ctx_));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  st = status();
  EXPECT_LE(st["store"]["compressed_bytes"].get<uint64_t>(), bytes / 2);
  EXPECT_GE(st["store"]["batches"].get<uint64_t>(), 1u);
  auto flows = proc_->query(ctx_, {{"cmd", "flows"}});
  ASSERT_TRUE(flows);
  uint64_t newest_kept = 0, oldest_kept = UINT64_MAX;
  for (const auto& f : (*flows)["result"]["flows"]) {
    newest_kept = std::max<uint64_t>(newest_kept, f["src_port"].get<uint64_t>());
    oldest_kept = std::min<uint64_t>(oldest_kept, f["src_port"].get<uint64_t>());
  }
  EXPECT_EQ(newest_kept, 40010u) << "the newest batch must survive the size bound";
  EXPECT_GT(oldest_kept, 40001u) << "the oldest batches go first";
}

// kill -9 during ingest, restart: every acknowledged batch is present exactly once.
TEST_F(AggregatorTest, KillNineDuringIngestLosesNothingAcknowledged) {
  std::set<uint64_t> acked;
  uint64_t next = 0;
  auto ship = [&](TestSender& s, std::chrono::milliseconds for_how_long) {
    auto end = std::chrono::steady_clock::now() + for_how_long;
    std::set<uint64_t> in_flight;
    // Pipelined like an agent: up to 32 batches in flight.
    while (std::chrono::steady_clock::now() < end) {
      while (in_flight.size() < 32) {
        s.send_raw(wire::encode(one_batch("k9", 1, next, static_cast<uint16_t>(next % 60000 + 1))));
        in_flight.insert(next++);
      }
      auto a = s.recv_ack(std::chrono::milliseconds(200));
      if (!a) continue;
      if (a->status == AckStatus::kOk || a->status == AckStatus::kDuplicate) {
        acked.insert(a->seq);
        in_flight.erase(a->seq);
      }
    }
    return in_flight;
  };
  std::set<uint64_t> unacked;
  {
    TestSender s(ctx_, proc_->listen());
    ASSERT_EQ(s.hello("k9", 1)->status, AckStatus::kHelloOk);
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      proc_->stop(SIGKILL);
    });
    unacked = ship(s, std::chrono::milliseconds(1500));
    killer.join();
  }
  ASSERT_GT(acked.size(), 10u) << "too few batches before the kill to mean anything";
  start();
  {  // the agent resends everything unacknowledged (and some acked ones, as a real one might)
    TestSender s(ctx_, proc_->listen());
    for (uint64_t seq : unacked)
      s.send_raw(wire::encode(one_batch("k9", 1, seq, static_cast<uint16_t>(seq % 60000 + 1))));
    for (uint64_t seq : unacked) {
      auto a = s.recv_ack();
      ASSERT_TRUE(a);
      EXPECT_TRUE(a->status == AckStatus::kOk || a->status == AckStatus::kDuplicate);
      (void)seq;
    }
    // Everything up to `next` is stored now (acknowledged before the kill, or just resent): all duplicates.
    for (uint64_t seq = 0; seq < 5 && seq < next; ++seq)
      EXPECT_EQ(s.batch(one_batch("k9", 1, seq, static_cast<uint16_t>(seq % 60000 + 1)))->status,
                AckStatus::kDuplicate);
  }
  auto st = status();
  EXPECT_EQ(st["records_total"].get<uint64_t>(), next) << "every batch stored exactly once";
  auto flows = proc_->query(ctx_, {{"cmd", "flows"}}, 10000);
  ASSERT_TRUE(flows);
  std::set<uint64_t> seen;
  for (const auto& f : (*flows)["result"]["flows"]) {
    EXPECT_EQ(f["packets"], 10) << "flow of seq " << f["src_port"] << " stored more than once";
    seen.insert(f["src_port"].get<uint64_t>() - 1);
  }
  for (uint64_t seq : acked) EXPECT_TRUE(seen.count(seq)) << "acknowledged batch " << seq << " is missing";
}

}  // namespace
