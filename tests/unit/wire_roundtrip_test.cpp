#include <limits>

#include <gtest/gtest.h>

#include "netprism/wire.hpp"

namespace netprism {
namespace {

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kMax32 = std::numeric_limits<uint32_t>::max();

Flowlet extreme_flowlet(uint8_t fill) {
  Flowlet f{};
  for (int i = 0; i < 16; ++i) f.key.saddr[i] = fill, f.key.daddr[i] = static_cast<uint8_t>(255 - fill);
  f.key.ifindex = kMax32;
  f.key.sport = 65535;
  f.key.dport = 0;
  f.key.qpn = 0xffffff;
  f.key.proto = NP_PROTO_ROCE;
  f.key.dir = NP_DIR_EGRESS;
  f.key.family = 6;
  f.first_ns = 0;
  f.last_ns = kMax64;
  f.packets = kMax64;
  f.bytes = kMax64 - 1;
  f.payload_bytes = 1;
  for (auto& v : f.roce_ops) v = kMax32;
  f.last_psn = 0xffffff;
  f.tcp_flags = 0xffff;
  f.end_reason = NP_END_SHUTDOWN;
  return f;
}

template <class T>
T roundtrip(const T& in) {
  auto bytes = wire::encode(in);
  auto r = wire::decode(bytes);
  EXPECT_TRUE(r) << r.error;
  if (!r) return {};
  return std::get<T>(r.message->body);
}

TEST(WireRoundTrip, HelloExtremes) {
  Hello h{"node-ü-" + std::string(300, 'x'),
          "0.1.0",
          kMax64,
          {{"eth0", kMax32, {"10.0.0.1", "fe80::1"}}, {"", 0, {}}},
          {"chrony", true, -1},
          kMax64};
  EXPECT_EQ(roundtrip(h), h);
  h.clock = {"ptp", false, std::numeric_limits<int64_t>::min()};
  EXPECT_EQ(roundtrip(h), h);
  h.clock.est_error_ns = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(roundtrip(h), h);
}

TEST(WireRoundTrip, BatchWithEveryRecordType) {
  Batch b;
  b.node = "gpu-017";
  b.epoch = kMax64;
  b.seq = kMax64;
  b.sent_ns = 1'700'000'000'000'000'000ull;
  b.flowlets = {extreme_flowlet(0), extreme_flowlet(0xff), Flowlet{}};
  b.flowlets[2].key.proto = NP_PROTO_TCP;
  b.flowlets[2].key.family = 4;
  b.rdma_samples = {{"mlx5_0", 1, kMax64, kMax64, 0, kMax64, 0, {{"out_of_buffer", kMax64}, {"rnr_nak", 0}}},
                    {"", 0, 0, 0, 0, 0, 0, {}}};
  b.rdma_bursts = {{"mlx5_1", kMax32, 0, kMax64, kMax64, kMax64, 0, 1}};
  b.qps = {{"mlx5_0", 1, 0xffffff, 0, "RC", "RTS", "10.0.0.1", "fe80::2", kMax32, "python3"}};
  b.counters = {{"captured", kMax64}, {"dropped_spool_full", 0}};
  EXPECT_EQ(roundtrip(b), b);
}

TEST(WireRoundTrip, EmptyBatch) {
  Batch b;
  b.node = "n";
  EXPECT_EQ(roundtrip(b), b);
}

TEST(WireRoundTrip, AckEveryStatus) {
  for (auto st : {AckStatus::kOk, AckStatus::kDuplicate, AckStatus::kUnknownNode, AckStatus::kRejected,
                  AckStatus::kHelloOk}) {
    Ack a{kMax64, 0, st, "reason", kMax64};
    EXPECT_EQ(roundtrip(a), a);
  }
}

TEST(WireRoundTrip, Heartbeat) {
  Heartbeat h{"n1", 7, kMax64, {{"acked", 3}}};
  EXPECT_EQ(roundtrip(h), h);
}

TEST(WireRoundTrip, MessageTypeIsReported) {
  auto r = wire::decode(wire::encode(Ack{}));
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.message->type, MsgType::kAck);
}

}  // namespace
}  // namespace netprism
