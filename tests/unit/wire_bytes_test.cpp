// The bytes on the wire: what the encoders write is pinned (support/pinned_messages.hpp), every legal
// encoding of a flowlet's integers decodes, and no truncation of one reads past the end of the message.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <msgpack.hpp>

#include <gtest/gtest.h>

#include "netprism/wire.hpp"
#include "support/pinned_messages.hpp"

namespace netprism {
namespace {

template <class T>
void expect_pinned(const T& m, const std::string& bytes) {
  EXPECT_EQ(wire::encode(m), bytes);
  auto r = wire::decode(bytes);
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(std::get<T>(r.message->body), m);
}

TEST(WireBytes, EncodingsArePinned) {
  expect_pinned(pinned::batch(), pinned::kBatchWire);
  expect_pinned(pinned::hello(), pinned::kHelloWire);
  expect_pinned(pinned::ack(), pinned::kAckWire);
  expect_pinned(pinned::heartbeat(), pinned::kHeartbeatWire);
}

// A batch an earlier build wrote (QpEntry of 10 fields, before sq_psn/rq_psn/ts_ns) decodes, the PSNs 0.
TEST(WireBytes, BatchWithQpEntriesOfEarlierBuildsDecodes) {
  auto r = wire::decode(pinned::kBatchWireQpV10);
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(std::get<Batch>(r.message->body), pinned::batch());
}

// A batch of one flowlet whose every integer is a uint64 (0xcf + 8 bytes): legal msgpack for any value, and
// the widest a flowlet gets (213 bytes), which the decoder's fast path must not assume away.
std::string wide_batch(const Flowlet& f) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack(kWireSchemaVersion);
  pk.pack(static_cast<uint32_t>(MsgType::kBatch));
  pk.pack_array(9);
  pk.pack(std::string("n1"));
  for (int i = 0; i < 3; ++i) pk.pack(1u);
  pk.pack_array(1);
  pk.pack_array(20);
  for_each_flowlet_field([&](auto field, auto get) {
    const auto& m = get(f);
    if constexpr (decltype(field)::kind == FieldKind::kAddr) {
      pk.pack_bin(sizeof m);
      pk.pack_bin_body(reinterpret_cast<const char*>(m), sizeof m);
    } else if constexpr (decltype(field)::kind == FieldKind::kVec) {
      pk.pack_array(std::size(m));
      for (auto v : m) pk.pack_fix_uint64(v);
    } else {
      pk.pack_fix_uint64(m);
    }
  });
  pk.pack_nil();
  pk.pack_nil();
  for (int i = 0; i < 3; ++i) pk.pack_array(0);
  pk.pack_map(0);
  return std::string(buf.data(), buf.size());
}

TEST(WireBytes, WideIntegerEncodingsDecode) {
  const Flowlet f = pinned::batch().flowlets.at(0);
  auto r = wire::decode(wide_batch(f));
  ASSERT_TRUE(r) << r.error;
  const auto& b = std::get<Batch>(r.message->body);
  ASSERT_EQ(b.flowlets.size(), 1u);
  EXPECT_EQ(b.flowlets[0], f);
}

// Two pages, the second inaccessible: bytes placed to end at the boundary are followed by nothing readable,
// so any read past their end is a SIGSEGV instead of a silent over-read. Unmapped on every exit.
class GuardedBuffer {
 public:
  GuardedBuffer() : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {
    void* m = mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    base_ = static_cast<char*>(m);
    if (mprotect(base_ + page_, page_, PROT_NONE) != 0) {
      munmap(base_, 2 * page_);
      base_ = nullptr;
    }
  }
  ~GuardedBuffer() {
    if (base_) munmap(base_, 2 * page_);
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  bool ok() const { return base_ != nullptr; }
  // A view of `bytes` copied so that their last byte is the last readable one.
  std::string_view place(std::string_view bytes) {
    char* at = base_ + page_ - bytes.size();
    std::memcpy(at, bytes.data(), bytes.size());
    return {at, bytes.size()};
  }

 private:
  std::size_t page_;
  char* base_ = nullptr;
};

TEST(WireBytes, TruncatedRecordBeforeAnUnmappedPageIsAnErrorNotAnOverRead) {
  GuardedBuffer guard;
  ASSERT_TRUE(guard.ok()) << std::strerror(errno);
  const Flowlet f = pinned::batch().flowlets.at(0);
  for (const std::string& whole : {wide_batch(f), pinned::kBatchWire}) {
    ASSERT_TRUE(wire::decode(guard.place(whole))) << "the whole message decodes where it is placed";
    for (std::size_t n = 1; n < whole.size(); ++n) {
      auto r = wire::decode(guard.place(std::string_view(whole).substr(0, n)));
      EXPECT_FALSE(r) << n;
      EXPECT_FALSE(r.error.empty()) << n;
    }
  }
}

}  // namespace
}  // namespace netprism
