// The query endpoint answers other clients while a huge query runs (issue 18): with a store of ~250k
// distinct flows, a `flows` query without a limit (seconds of decoding and JSON) and a `dump` are sent
// first, then `status` and `jobs` from another client; those two must be answered while the flows query
// still runs, and the store queries must still complete.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "test_sender.hpp"

using namespace netprism;
using namespace netprism::test;
using nlohmann::json;

namespace {

class Client {
 public:
  Client(zmq::context_t& ctx, const std::string& ep) : s_(ctx, zmq::socket_type::req) {
    s_.set(zmq::sockopt::linger, 0);
    s_.connect(ep);
  }
  void send(const json& req) {
    auto text = req.dump();
    (void)s_.send(zmq::buffer(text), zmq::send_flags::none);
  }
  std::optional<json> recv(int timeout_ms) {
    zmq::pollitem_t it[] = {{s_.handle(), 0, ZMQ_POLLIN, 0}};
    if (zmq::poll(it, 1, std::chrono::milliseconds(timeout_ms)) <= 0) return std::nullopt;
    zmq::message_t m;
    if (!s_.recv(m, zmq::recv_flags::dontwait)) return std::nullopt;
    return json::parse(m.to_string_view());
  }
  zmq::socket_t& socket() { return s_; }

 private:
  zmq::socket_t s_;
};

TEST(QueryConcurrency, StatusAndJobsAnsweredWhileAHugeQueryRuns) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("np_querycc_" + std::to_string(::getpid()));
  zmq::context_t ctx;
  {
    AggregatorProcess proc(NETPRISM_AGGREGATOR_BIN, dir, free_port(), free_port());
    ASSERT_TRUE(proc.wait_ready(ctx));
    TestSender s(ctx, proc.listen());
    ASSERT_EQ(s.hello("big", 1)->status, AckStatus::kHelloOk);
    constexpr int kBatches = 60, kPer = 4096;
    const uint64_t t = unix_ns() - 10'000'000'000ull;
    for (int b = 0; b < kBatches; ++b) {
      Batch batch;
      batch.node = "big";
      batch.epoch = 1;
      batch.seq = static_cast<uint64_t>(b);
      batch.sent_ns = unix_ns();
      for (int i = 0; i < kPer; ++i) {  // nearly every flowlet its own flow (source address and port)
        const int k = b * kPer + i;
        batch.flowlets.push_back(make_flowlet(
            "10.216." + std::to_string(k / 60000) + "." + std::to_string(k % 250 + 1), "10.217.0.1",
            static_cast<uint16_t>(1024 + k % 60000), 29500, t, t + 1000000, 1500, 1));
      }
      auto a = s.batch(batch);
      ASSERT_TRUE(a);
      ASSERT_EQ(a->status, AckStatus::kOk);
    }
    Client heavy(ctx, proc.query()), heavy2(ctx, proc.query()), light(ctx, proc.query());
    for (Client* c : {&heavy, &heavy2, &light}) {  // connected and answered once before the race
      c->send({{"cmd", "status"}});
      ASSERT_TRUE(c->recv(5000));
    }
    // The first `jobs` opens the daemon's job-history reader (a store open): done before the race too, so the
    // race measures the store queries' hold on the socket, not that one-off open.
    light.send({{"cmd", "jobs"}});
    ASSERT_TRUE(light.recv(5000));
    heavy.send({{"cmd", "flows"}});
    heavy2.send({{"cmd", "dump"}, {"after_id", 0}});
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // The light client: status, then jobs, each answered while the store queries are still running.
    std::vector<std::string> order;
    light.send({{"cmd", "status"}});
    auto st = light.recv(5000);
    ASSERT_TRUE(st && st->value("ok", false)) << "status not answered within 5 s";
    order.push_back("status");
    light.send({{"cmd", "jobs"}});
    auto jobs = light.recv(5000);
    ASSERT_TRUE(jobs && jobs->value("ok", false)) << "jobs not answered within 5 s";
    order.push_back("jobs");
    // `flows` (seconds of decoding) must still be running. `dump` is not asked: one page of stored batches
    // takes milliseconds, and the worker runs the two in whichever order the socket took them from their two
    // clients, so when it took the dump first, the dump may be done by now (a loaded CI runner, twice).
    // Either way the flows query runs after or instead of it, so it is still running unless the store
    // queries held up status and jobs.
    zmq::pollitem_t it[] = {{heavy.socket().handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(it, 1, std::chrono::milliseconds(0));
    EXPECT_FALSE(it[0].revents & ZMQ_POLLIN) << "flows finished before status and jobs were answered";
    // Completion is a hang check, not a speed bound. Under ThreadSanitizer the unlimited `flows` outlived the
    // old 60 s bound on CI's 2-core runner (the test failed after 78 s); here, with one of 2 cores kept busy,
    // it answered 78.8 s after the race (the Release build: 8-12 s with fuzzers running beside it).
    constexpr int kCompleteMs = 600'000;
    const auto race_end = std::chrono::steady_clock::now();
    auto flows = heavy.recv(kCompleteMs);
    ASSERT_TRUE(flows) << "flows never completed";
    std::fprintf(stderr, "flows answered %.1f s after status and jobs\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - race_end).count());
    ASSERT_TRUE(flows->value("ok", false)) << flows->dump().substr(0, 300);
    EXPECT_GT((*flows)["result"]["flows"].size(), static_cast<std::size_t>(kBatches * kPer * 9 / 10));
    auto dump = heavy2.recv(kCompleteMs);
    ASSERT_TRUE(dump && dump->value("ok", false)) << "dump never completed";
    EXPECT_EQ((*dump)["result"]["batches"].size(), static_cast<std::size_t>(kBatches));
    EXPECT_EQ(order, (std::vector<std::string>{"status", "jobs"}));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
