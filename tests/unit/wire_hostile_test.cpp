// Decoding untrusted bytes: every malformed input is rejected with a reason, nothing throws, and no
// allocation is sized by a declared length the input cannot back.
#include <msgpack.hpp>

#include <random>

#include <gtest/gtest.h>

#include "netprism/wire.hpp"

namespace netprism {
namespace {

std::string valid_batch() {
  Batch b;
  b.node = "n1";
  b.epoch = 1;
  b.seq = 2;
  Flowlet f{};
  f.key.proto = NP_PROTO_TCP;
  f.key.family = 4;
  f.last_ns = 10;
  b.flowlets = {f, f};
  b.qps = {{"mlx5_0", 1, 2, 3, "RC", "RTS", "a", "b", 4, "c"}};
  b.counters = {{"x", 1}};
  return wire::encode(b);
}

// Builds a message with an arbitrary envelope so tests can put wrong things in the right places.
template <class Fn>
std::string raw(Fn&& fn) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  fn(pk);
  return std::string(buf.data(), buf.size());
}

void expect_rejected(const std::string& bytes, const std::string& needle = "") {
  wire::DecodeResult r;
  ASSERT_NO_THROW(r = wire::decode(bytes));
  EXPECT_FALSE(r);
  EXPECT_FALSE(r.error.empty());
  if (!needle.empty()) {
    EXPECT_NE(r.error.find(needle), std::string::npos) << r.error;
  }
}

TEST(WireHostile, EmptyInput) {
  expect_rejected("", "empty");
}

TEST(WireHostile, TruncatedAtEveryByte) {
  auto bytes = valid_batch();
  ASSERT_TRUE(wire::decode(bytes));
  for (std::size_t n = 1; n < bytes.size(); ++n) expect_rejected(bytes.substr(0, n));
}

TEST(WireHostile, TrailingBytes) {
  expect_rejected(valid_batch() + "x", "trailing");
}

TEST(WireHostile, UnknownSchemaVersion) {
  auto m = raw([](auto& pk) {
    pk.pack_array(3);
    pk.pack(99u);
    pk.pack(static_cast<uint32_t>(MsgType::kAck));
    pk.pack_array(0);
  });
  expect_rejected(m, "schema version 99");
}

TEST(WireHostile, UnknownMessageType) {
  auto m = raw([](auto& pk) {
    pk.pack_array(3);
    pk.pack(kWireSchemaVersion);
    pk.pack(77u);
    pk.pack_array(0);
  });
  expect_rejected(m, "unknown message type");
}

TEST(WireHostile, WrongTypes) {
  // The envelope is not an array.
  expect_rejected(raw([](auto& pk) { pk.pack(std::string("hello")); }), "envelope");
  // A string where the seq number goes.
  expect_rejected(raw([](auto& pk) {
                    pk.pack_array(3);
                    pk.pack(kWireSchemaVersion);
                    pk.pack(static_cast<uint32_t>(MsgType::kAck));
                    pk.pack_array(5);
                    pk.pack(1u);
                    pk.pack(std::string("two"));
                    pk.pack(0u);
                    pk.pack(std::string(""));
                    pk.pack(0u);
                  }),
                  "ack.seq");
  // A negative number for an unsigned field.
  expect_rejected(raw([](auto& pk) {
                    pk.pack_array(3);
                    pk.pack(kWireSchemaVersion);
                    pk.pack(static_cast<uint32_t>(MsgType::kHeartbeat));
                    pk.pack_array(4);
                    pk.pack(std::string("n"));
                    pk.pack(-1);
                    pk.pack(0u);
                    pk.pack_map(0);
                  }),
                  "heartbeat.epoch");
  // Too few fields.
  expect_rejected(raw([](auto& pk) {
                    pk.pack_array(3);
                    pk.pack(kWireSchemaVersion);
                    pk.pack(static_cast<uint32_t>(MsgType::kBatch));
                    pk.pack_array(2);
                    pk.pack(std::string("n"));
                    pk.pack(1u);
                  }),
                  "batch");
}

TEST(WireHostile, OutOfRangeAndInvalidValues) {
  auto flowlet_batch = [](auto&& tweak) {
    return raw([&](auto& pk) {
      pk.pack_array(3);
      pk.pack(kWireSchemaVersion);
      pk.pack(static_cast<uint32_t>(MsgType::kBatch));
      pk.pack_array(9);
      pk.pack(std::string("n"));
      pk.pack(1u);
      pk.pack(1u);
      pk.pack(1u);
      pk.pack_array(1);
      std::vector<uint64_t> v = {0, 70000, 1, 0, NP_PROTO_TCP, 0, 4, 5, 6, 1, 1, 1};
      tweak(v);
      pk.pack_array(18);
      std::string a(16, '\0');
      pk.pack_bin(16);
      pk.pack_bin_body(a.data(), 16);
      pk.pack_bin(16);
      pk.pack_bin_body(a.data(), 16);
      for (auto x : v) pk.pack(x);
      pk.pack_array(4);
      for (int i = 0; i < 4; ++i) pk.pack(0u);
      pk.pack(0u);
      pk.pack(0u);
      pk.pack(1u);
      for (int i = 0; i < 3; ++i) pk.pack_array(0);
      pk.pack_map(0);
    });
  };
  expect_rejected(flowlet_batch([](auto&) {}), "flowlet.sport");  // port 70000
  expect_rejected(flowlet_batch([](auto& v) { v[1] = 1, v[4] = 9; }), "flowlet.proto");
  expect_rejected(flowlet_batch([](auto& v) { v[1] = 1, v[6] = 5; }), "flowlet.family");
  expect_rejected(flowlet_batch([](auto& v) { v[1] = 1, v[7] = 9, v[8] = 3; }), "last_ns before first_ns");
}

// Headers that declare enormous containers backed by a handful of bytes.
TEST(WireHostile, HugeDeclaredSizes) {
  const std::vector<std::string> headers = {
      std::string("\xdd\xff\xff\xff\xff", 5),      // array32 of 4G elements
      std::string("\xdf\xff\xff\xff\xff", 5),      // map32
      std::string("\xdb\xff\xff\xff\xff", 5),      // str32
      std::string("\xc6\xff\xff\xff\xff", 5),      // bin32
      std::string("\xc9\xff\xff\xff\xff\x01", 6),  // ext32
      std::string("\xdc\xff\xff", 3),              // array16
  };
  for (const auto& h : headers) {
    expect_rejected(h);
    expect_rejected(h + std::string(64, '\0'));
  }
  // The same inside an otherwise valid envelope: the flowlet array claims 2^32-1 entries.
  std::string m = raw([](auto& pk) {
    pk.pack_array(3);
    pk.pack(kWireSchemaVersion);
    pk.pack(static_cast<uint32_t>(MsgType::kBatch));
    pk.pack_array(9);
    pk.pack(std::string("n"));
    pk.pack(1u);
    pk.pack(1u);
    pk.pack(1u);
  });
  expect_rejected(m + std::string("\xdd\xff\xff\xff\xff", 5) + std::string(100, '\x01'));
}

TEST(WireHostile, DeepNesting) {
  std::string m(10000, '\x91');  // fixarray(1) nested 10000 deep
  m += '\x01';
  expect_rejected(m, "deep");
}

TEST(WireHostile, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(12345);
  auto base = valid_batch();
  for (int i = 0; i < 20000; ++i) {
    std::string m;
    if (i % 2) {
      m = base;
      for (int k = 0; k < 1 + i % 5; ++k) m[rng() % m.size()] = static_cast<char>(rng());
    } else {
      m.resize(1 + rng() % 256);
      for (auto& c : m) c = static_cast<char>(rng());
    }
    wire::DecodeResult r;
    ASSERT_NO_THROW(r = wire::decode(m));
    EXPECT_NE(static_cast<bool>(r), !r.error.empty());
  }
}

TEST(WireHostile, OversizedMessage) {
  wire::DecodeLimits lim;
  lim.max_message_bytes = 16;
  auto r = wire::decode(valid_batch(), lim);
  EXPECT_FALSE(r);
  EXPECT_NE(r.error.find("exceeds"), std::string::npos);
}

}  // namespace
}  // namespace netprism
