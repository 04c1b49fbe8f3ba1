// Issue 18's acceptance over the real daemon with CURVE + ZAP: a plain DEALER gets nothing and stores
// nothing (its bytes never reach the decoder: ingest.messages stays 0); an agent key bound to node A cannot
// write for node B; an unknown key gets nothing; a `read` client gets jobs but not flows or dump; an agent
// pinned to the wrong server key never drops its spool.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "clock.hpp"
#include "delivery.hpp"
#include "spool.hpp"
#include "test_sender.hpp"

using namespace netprism;
using namespace netprism::test;
using nlohmann::json;

namespace {

constexpr auto kSilence = std::chrono::milliseconds(1500);  // far above a loopback round trip (~1 ms)

Batch one_batch(const std::string& node, uint64_t epoch, uint64_t seq) {
  return flowlet_batch(node, epoch, seq, {.src = "10.213.9.1", .dst = "10.213.9.2"});
}

// The HELLO and heartbeat an agent of `node` in `epoch` sends (what agent::Delivery asks for).
agent::Delivery::HelloFn hello_of(std::string node, uint64_t epoch) {
  return [node, epoch] {
    Hello h;
    h.node = node;
    h.epoch = epoch;
    h.sent_ns = agent::real_now_ns();
    return h;
  };
}

agent::Delivery::HeartbeatFn heartbeat_of(std::string node, uint64_t epoch) {
  return [node, epoch] {
    Heartbeat hb;
    hb.node = node;
    hb.epoch = epoch;
    return hb;
  };
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("np_auth_" + std::to_string(::getpid()) + "_" + std::to_string(unix_ns() % 1000000));
    std::filesystem::create_directories(dir_);
    for (const char* k : {"server", "agent_a", "admin", "reader", "stranger", "fake_server"})
      ASSERT_EQ(keys::generate(dir_ + "/" + k), "");
    std::ofstream(dir_ + "/agents") << "# node key\nnode-a " << pub("agent_a")
                                    << "  # bound to node-a only\n";
    std::ofstream(dir_ + "/clients") << "admin " << pub("admin") << "\nread " << pub("reader") << "\n";
    proc_ = std::make_unique<AggregatorProcess>(NETPRISM_AGGREGATOR_BIN, dir_ + "/data", free_port(),
                                                free_port(), key_args());
    proc_->set_client(client("admin"));
    ASSERT_TRUE(proc_->wait_ready(ctx_)) << "aggregator did not come up";
  }
  void TearDown() override {
    proc_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string pub(const std::string& name) {
    std::string err;
    return keys::read_public(dir_ + "/" + name + ".pub", err).value_or("");
  }
  keys::ClientCurve client(const std::string& name, const std::string& server = "server") {
    keys::ClientCurve c;
    EXPECT_EQ(keys::load_client(dir_ + "/" + name + ".key", dir_ + "/" + server + ".pub", c), "");
    return c;
  }
  json status() {
    auto r = proc_->query(ctx_, {{"cmd", "status"}});
    EXPECT_TRUE(r && r->value("ok", false));
    return r ? (*r)["result"] : json();
  }
  // Stored batches of `node` (admin dump).
  std::size_t stored_for(const std::string& node) {
    auto r = proc_->query(ctx_, {{"cmd", "dump"}, {"after_id", 0}});
    EXPECT_TRUE(r && r->value("ok", false));
    std::size_t n = 0;
    if (r)
      for (const auto& b : (*r)["result"]["batches"]) n += b["node"] == node;
    return n;
  }

  // The daemon's key flags, with the agents allowlist `agents` (default: node-a's key).
  std::vector<std::string> key_args(const std::string& agents = "") {
    return {"--server-key", dir_ + "/server.key", "--agents", agents.empty() ? dir_ + "/agents" : agents,
            "--clients",    dir_ + "/clients"};
  }
  // Restarts the daemon on the same ports and data directory with `args`.
  bool restart_on_same_ports(std::vector<std::string> args) {
    auto port = [](const std::string& ep) { return std::stoi(ep.substr(ep.rfind(':') + 1)); };
    const int listen_port = port(proc_->listen()), query_port = port(proc_->query());
    proc_.reset();
    proc_ = std::make_unique<AggregatorProcess>(NETPRISM_AGGREGATOR_BIN, dir_ + "/data", listen_port,
                                                query_port, std::move(args));
    proc_->set_client(client("admin"));
    return proc_->wait_ready(ctx_);
  }
  // node-a's agent against this daemon: its key, a quick back-off, and `ack_timeout_ns` (sanitized daemons
  // answered a HELLO in up to ~1 s).
  agent::DeliveryOptions agent_options(uint64_t ack_timeout_ns) {
    agent::DeliveryOptions o;
    o.endpoint = proc_->listen();
    o.curve = client("agent_a");
    o.ack_timeout_ns = ack_timeout_ns;
    o.backoff_min_ns = 20'000'000;
    o.backoff_max_ns = 200'000'000;
    return o;
  }
  // Services the agent until `done` or `limit` (far above any sanitizer slowdown).
  static void serve(agent::Delivery& d, const std::function<bool()>& done,
                    std::chrono::seconds limit = std::chrono::seconds(120)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end && !done()) {
      d.service(agent::mono_now_ns());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  zmq::context_t ctx_;
  std::string dir_;
  std::unique_ptr<AggregatorProcess> proc_;
};

TEST_F(AuthTest, PlainDealerGetsNoAckAndStoresNothing) {
  TestSender plain(ctx_, proc_->listen());
  Hello h;
  h.node = "node-a";
  h.epoch = 1;
  h.sent_ns = unix_ns();
  plain.send_raw(wire::encode(h));
  plain.send_raw(wire::encode(one_batch("node-a", 1, 0)));
  EXPECT_FALSE(plain.recv_ack(kSilence)) << "a plain DEALER got an answer";
  auto st = status();
  EXPECT_EQ(st["agents"].size(), 0u) << st.dump();
  EXPECT_EQ(st["records_total"], 0) << st.dump();
  EXPECT_EQ(st["ingest"]["messages"], 0) << "an unauthenticated peer's bytes reached the decoder";
}

TEST_F(AuthTest, UnknownKeyGetsNothing) {
  TestSender s(ctx_, proc_->listen(), client("stranger"));
  s.send_raw(wire::encode(one_batch("node-a", 1, 0)));
  EXPECT_FALSE(s.recv_ack(kSilence));
  auto st = status();
  EXPECT_EQ(st["ingest"]["messages"], 0);
  EXPECT_GE(st["auth"]["denied_connections"], 1) << st.dump();
  EXPECT_EQ(st["auth"]["agent_keys"], 1);
}

TEST_F(AuthTest, KeyBoundToNodeACannotWriteForB) {
  TestSender s(ctx_, proc_->listen(), client("agent_a"));
  auto h = s.hello("node-b", 5);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, AckStatus::kRejected) << "HELLO for another node accepted";
  h = s.hello("node-a", 5);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, AckStatus::kHelloOk);
  auto a = s.batch(one_batch("node-a", 5, 0));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, AckStatus::kOk);
  a = s.batch(one_batch("node-b", 5, 0));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, AckStatus::kRejected);
  EXPECT_EQ(a->reason, "node not allowed for this key");

  EXPECT_EQ(stored_for("node-b"), 0u);
  EXPECT_EQ(stored_for("node-a"), 1u);
  auto st = status();
  ASSERT_EQ(st["agents"].size(), 1u) << st.dump();
  EXPECT_EQ(st["agents"][0]["node"], "node-a");
  EXPECT_EQ(st["ingest"]["rejected_by_reason"]["node not allowed for this key"], 2) << st.dump();
}

// Exhaustion by registration: an admitted but hostile agent sending HELLOs for random node names registers
// nothing -- the registry is bounded by the agents allowlist, one node per key.
TEST_F(AuthTest, HelloFloodWithRandomNodesRegistersNothing) {
  TestSender s(ctx_, proc_->listen(), client("agent_a"));
  Hello h;
  h.agent_version = "flood";
  h.epoch = 1;
  constexpr int kHellos = 2000;
  for (int i = 0; i < kHellos; ++i) {
    h.node = "rnd-" + std::to_string(i * 7919 % 100003);
    s.send_raw(wire::encode(h));
  }
  int rejected = 0;
  for (int i = 0; i < kHellos; ++i) {
    auto a = s.recv_ack();
    ASSERT_TRUE(a) << "answer " << i;
    rejected += a->status == AckStatus::kRejected;
  }
  EXPECT_EQ(rejected, kHellos);
  auto st = status();
  EXPECT_EQ(st["agents"].size(), 0u);
  EXPECT_EQ(st["ingest"]["rejected_by_reason"]["node not allowed for this key"], kHellos);
}

TEST_F(AuthTest, ReadClientGetsJobsButNotRawTraffic) {
  proc_->set_client(client("reader"));
  auto r = proc_->query(ctx_, {{"cmd", "jobs"}});
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->value("ok", false)) << r->dump();
  for (const char* cmd : {"dump", "flows"}) {
    r = proc_->query(ctx_, {{"cmd", cmd}});
    ASSERT_TRUE(r) << cmd;
    EXPECT_FALSE(r->value("ok", true)) << cmd;
    EXPECT_TRUE(r->value("forbidden", false)) << cmd;
    EXPECT_NE(r->value("error", "").find("admin role"), std::string::npos) << r->dump();
  }
  proc_->set_client(client("admin"));
  r = proc_->query(ctx_, {{"cmd", "dump"}});
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->value("ok", false));
  proc_->set_client(client("agent_a"));  // an agent's key is no client key: refused in the handshake
  EXPECT_FALSE(proc_->query(ctx_, {{"cmd", "jobs"}}, 1000));
}

// The agent's real delivery path, pinned to a server key the aggregator does not hold: no handshake, no
// ACK, so every batch stays pending and goes to the spool; the same spool pinned right is delivered.
TEST_F(AuthTest, WrongServerKeyAgentNeverDropsItsSpool) {
  auto deliver = [&](const std::string& server, int ms) {
    agent::Spool spool(dir_ + "/spool", 1 << 20);
    std::string err;
    EXPECT_TRUE(spool.open(err)) << err;
    agent::DeliveryOptions o;
    o.endpoint = proc_->listen();
    o.curve = client("agent_a", server);
    o.hello_timeout_ns = 300'000'000;
    o.backoff_min_ns = 20'000'000;
    o.backoff_max_ns = 200'000'000;
    agent::Delivery d(ctx_, o, spool, hello_of("node-a", 9), heartbeat_of("node-a", 9));
    if (spool.count() == 0)
      for (uint64_t seq = 0; seq < 3; ++seq) d.submit({9, seq}, wire::encode(one_batch("node-a", 9, seq)), 1);
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end && !d.idle()) {
      d.service(agent::mono_now_ns());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto stats = d.stats();
    d.spool_all();
    return std::make_pair(stats, spool.count());
  };
  auto [bad, spooled] = deliver("fake_server", 3000);
  EXPECT_EQ(bad.acked_batches, 0u);
  EXPECT_EQ(bad.hello_oks, 0u);
  EXPECT_EQ(spooled, 3u) << "batches left the spool without an ACK from the real aggregator";
  EXPECT_EQ(stored_for("node-a"), 0u);

  auto [good, left] = deliver("server", 10000);  // positive control: the same spool, the right key
  EXPECT_EQ(good.acked_batches, 3u);
  EXPECT_EQ(left, 0u);
  EXPECT_EQ(stored_for("node-a"), 3u);
}

}  // namespace

namespace {
// The agent's real delivery path against a sender byte budget (issue 18): batches over it are deferred (no
// ACK); the agent keeps them, reconnects after its ACK timeout and resends, until every one is stored once.
// The budget is 1 KiB/s, so its 128 KiB bucket takes ~10 of the 20 batches (~13 KB each on the wire; 10
// measured) and the refill is negligible: deferrals happen however slowly the daemon reads (under TSan it
// is 5-15x slower; at 64 KiB/s the refill covered a slow daemon's reads and nothing was deferred, measured
// under TSan on the loaded shared machine; 16 KiB/s only moves that line). Once the agent has resent deferred
// batches, the daemon restarts on the same ports and store without a budget, and the agent, unchanged,
// delivers the rest: every batch stored exactly once.
TEST_F(AuthTest, AgentOverItsByteBudgetResendsUntilStored) {
  auto restart = [&](const char* bytes_per_s) {
    auto args = key_args();
    args.insert(args.end(), {"--max-message-bytes", "65536", "--peer-bytes-per-s", bytes_per_s,
                             "--peer-cut-bytes", "262144"});
    return restart_on_same_ports(std::move(args));
  };
  ASSERT_TRUE(restart("1024"));
  agent::Spool spool(dir_ + "/spool2", 16 << 20);
  std::string err;
  ASSERT_TRUE(spool.open(err)) << err;
  agent::Delivery d(ctx_, agent_options(3'000'000'000), spool, hello_of("node-a", 4),
                    heartbeat_of("node-a", 4));
  constexpr uint64_t kBatches = 20;
  for (uint64_t seq = 0; seq < kBatches; ++seq) {
    Batch b = one_batch("node-a", 4, seq);
    for (int i = 1; i < 150; ++i) {
      b.flowlets.push_back(b.flowlets[0]);
      b.flowlets.back().key.sport = static_cast<uint16_t>(b.flowlets.back().key.sport + i);
    }
    d.submit({4, seq}, wire::encode(b), 150);
  }
  // Until the daemon has deferred a batch and the agent has resent one (status asked at most every 250 ms).
  nlohmann::json st;
  auto asked = std::chrono::steady_clock::now();
  serve(d, [&] {
    if (d.stats().resent_batches == 0 || std::chrono::steady_clock::now() < asked) return d.idle();
    asked = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
    st = status();
    return st["ingest"].value("deferred", uint64_t{0}) > 0 || d.idle();
  });
  EXPECT_GT(d.stats().resent_batches, 0u) << "nothing was deferred: the test did not exceed the budget";
  EXPECT_LT(d.stats().acked_batches, kBatches) << "the budget took every batch";
  EXPECT_GT(st["ingest"].value("deferred", uint64_t{0}), 0u) << st.dump();
  EXPECT_GT(st["ingest"]["deferred_by_peer"].value("node-a", 0), 0);

  // The agent had batches deferred on each connection before resending on the next one: a conforming agent
  // (its window x batch, ~200 KB here, under the 256 KiB cut bound) is never cut (daemon/peer_cut.hpp).
  EXPECT_EQ(st["ingest"].value("cut", uint64_t{1}), 0u) << st.dump();

  ASSERT_TRUE(restart("0"));
  serve(d, [&] { return d.idle(); });
  auto stats = d.stats();
  EXPECT_EQ(stats.acked_batches, kBatches);
  EXPECT_EQ(stats.rejected_batches, 0u);
  EXPECT_EQ(stored_for("node-a"), kBatches) << "a deferred batch was lost or stored twice";
}

// A key that keeps sending without waiting for answers is cut at the transport (issue 18,
// daemon/peer_cut.hpp): a flooder using agent_a's key sends ~50 KB batches without reading answers until
// more than --peer-cut-bytes (256 KiB) of them are unanswered; the key is refused for --peer-cut-s (2 s) and
// its live connections are shut, the agent's of the same key included. After the cool-down the agent (its
// batches kept until acknowledged) delivers every batch, each stored once, and is not cut again.
TEST_F(AuthTest, FloodingKeyIsCutAndItsAgentComesBackWithEverything) {
  auto args = key_args();
  args.insert(args.end(), {"--max-message-bytes", "65536", "--peer-bytes-per-s", "1048576",
                           "--peer-cut-bytes", "262144", "--peer-cut-s", "2"});
  proc_ = std::make_unique<AggregatorProcess>(NETPRISM_AGGREGATOR_BIN, dir_ + "/data_cut", free_port(),
                                              free_port(), std::move(args));
  proc_->set_client(client("admin"));
  ASSERT_TRUE(proc_->wait_ready(ctx_));
  agent::Spool spool(dir_ + "/spool_cut", 16 << 20);
  std::string err;
  ASSERT_TRUE(spool.open(err)) << err;
  agent::Delivery d(ctx_, agent_options(3'000'000'000), spool, hello_of("node-a", 7),
                    heartbeat_of("node-a", 7));
  auto submit = [&](uint64_t from, uint64_t to) {
    for (uint64_t seq = from; seq < to; ++seq) {
      Batch b = one_batch("node-a", 7, seq);
      for (int i = 1; i < 100; ++i) {
        b.flowlets.push_back(b.flowlets[0]);
        b.flowlets.back().key.sport = static_cast<uint16_t>(b.flowlets.back().key.sport + i);
      }
      d.submit({7, seq}, wire::encode(b), 100);
    }
  };
  submit(0, 5);
  serve(d, [&] { return d.idle(); });  // connected and heard from: its connection is one of the key's
  ASSERT_EQ(d.stats().acked_batches, 5u);
  submit(5, 20);  // kept by the agent while the key is cut

  // The flood: ~50 KB batches of an epoch never introduced (answered "unknown node", nothing stored).
  Batch big = one_batch("node-a", 99, 0);
  while (wire::encode(big).size() < 50000) {
    big.flowlets.push_back(big.flowlets[0]);
    big.flowlets.back().key.sport = static_cast<uint16_t>(big.flowlets.size());
  }
  auto flooder = std::make_unique<TestSender>(ctx_, proc_->listen(), client("agent_a"));
  // Not blocking: the flooder may be cut while it sends (a blocking send hung this test 1 run in 12 under
  // ASan).
  uint64_t queued = 0;
  for (uint64_t seq = 0; seq < 40; ++seq) {
    big.seq = seq;
    queued += flooder->send_raw_nowait(wire::encode(big));
  }
  ASSERT_GE(queued, 6u) << "too few flood messages queued to exceed peer_cut_bytes (262144)";
  json st = status();
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < end && st["ingest"].value("cut", uint64_t{0}) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    st = status();
  }
  ASSERT_EQ(st["ingest"].value("cut", uint64_t{0}), 1u) << st.dump();
  EXPECT_EQ(st["ingest"]["cut_by_peer"].value("node-a", 0), 1);
  EXPECT_GE(st["ingest"].value("cut_connections", uint64_t{0}), 2u) << "the flooder's and the agent's";
  flooder.reset();

  serve(d, [&] { return d.idle(); });
  const auto s = d.stats();
  EXPECT_EQ(s.acked_batches, 20u) << "shipped " << s.shipped_batches << ", resent " << s.resent_batches
                                  << ", reconnects " << s.reconnects << ", heartbeats sent " << s.heartbeats;
  EXPECT_EQ(d.stats().rejected_batches, 0u);
  EXPECT_EQ(stored_for("node-a"), 20u) << "a batch was lost or stored twice";
  st = status();
  EXPECT_EQ(st["ingest"].value("cut", uint64_t{0}), 1u) << "the agent was cut again: " << st.dump();
  EXPECT_GE(st["auth"].value("cut_refused_connections", uint64_t{0}), 1u) << st.dump();
  EXPECT_EQ(st["auth"].value("denied_connections", uint64_t{1}), 0u) << "a cut key is not an unknown one";
}
}  // namespace

namespace {
// An agent refused by authentication after it was delivering (its key dropped from the allowlist; the same
// happens while a flooding key is cut) comes back with everything once its key is allowed again, each batch
// stored once.
TEST_F(AuthTest, AgentRefusedAfterItWasDeliveringComesBackWhenAllowedAgain) {
  agent::Spool spool(dir_ + "/spool_refused", 16 << 20);
  std::string err;
  ASSERT_TRUE(spool.open(err)) << err;
  agent::Delivery d(ctx_, agent_options(2'000'000'000), spool, hello_of("node-a", 5),
                    heartbeat_of("node-a", 5));
  auto submit = [&](uint64_t from, uint64_t to) {
    for (uint64_t seq = from; seq < to; ++seq)
      d.submit({5, seq}, wire::encode(one_batch("node-a", 5, seq)), 1);
  };
  submit(0, 3);
  serve(d, [&] { return d.idle(); });
  ASSERT_EQ(d.stats().acked_batches, 3u);

  // The key leaves the allowlist. The agent is not serviced meanwhile: its DEALER reconnects by itself
  // and is refused, so the agent is still "ready" when its socket can no longer send.
  std::ofstream(dir_ + "/agents_without_a") << "node-b " << pub("stranger") << "\n";
  ASSERT_TRUE(restart_on_same_ports(key_args(dir_ + "/agents_without_a")));
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until && status()["auth"].value("denied_connections", 0) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GT(status()["auth"].value("denied_connections", 0), 0) << "the agent's reconnection was not refused";
  submit(3, 6);
  const uint64_t reconnects = d.stats().reconnects;
  serve(d, [&] { return d.stats().reconnects > reconnects; });
  EXPECT_GT(d.stats().reconnects, reconnects) << "the refused agent never tried a new connection";

  ASSERT_TRUE(restart_on_same_ports(key_args()));
  serve(d, [&] { return d.idle(); });
  EXPECT_EQ(d.stats().acked_batches, 6u);
  EXPECT_EQ(d.stats().rejected_batches, 0u);
  EXPECT_EQ(stored_for("node-a"), 6u) << "a batch was lost or stored twice";
}
}  // namespace
