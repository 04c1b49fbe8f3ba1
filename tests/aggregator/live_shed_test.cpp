// The live analysis counts what it sheds under the cause's own name (issue 20): flowlets refused because
// the pending queue was full, events refused because the connection table was full, and transfers evicted
// early at the transfer bound, each in LiveAnalysis::dropped_by_cause(), their sum in dropped(). Tiny bounds
// through Settings::analysis_max_events (the pending queue holds half of it, the engine keeps that many
// transfers and max(1024, a tenth) connections); the real analysis thread (run()) over a real store.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "batch_codec.hpp"
#include "daemon/live_analysis.hpp"
#include "daemon/log.hpp"
#include "netprism/addr.hpp"

using namespace netprism;
namespace fs = std::filesystem;

namespace {

struct TmpDir {
  std::string path = [] {
    auto p = fs::temp_directory_path() /
             ("np_liveshed_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(p);
    return p.string();
  }();
  ~TmpDir() { fs::remove_all(path); }
};

constexpr uint16_t kFirstPort = 10000;

// `n` TCP flowlets a -> b observed by the sender "a", carrying data, ending now: source ports
// kFirstPort + first_port .. + n when `distinct` (a connection each), else all on kFirstPort + first_port.
std::string stored_batch(size_t n, uint16_t first_port, bool distinct) {
  Batch b;
  b.node = "a";
  const auto sa = parse_addr("10.0.0.1"), da = parse_addr("10.0.0.2");
  const uint64_t now = daemon::now_unix_ns();
  for (size_t i = 0; i < n; ++i) {
    Flowlet f{};
    std::memcpy(f.key.saddr, sa->data(), 16);
    std::memcpy(f.key.daddr, da->data(), 16);
    f.key.family = 4;
    f.key.sport = static_cast<uint16_t>(kFirstPort + first_port + (distinct ? i : 0));
    f.key.dport = 9000;
    f.key.proto = NP_PROTO_TCP;
    f.key.dir = NP_DIR_EGRESS;
    f.first_ns = now - 1'000'000 + i;
    f.last_ns = now + i;
    f.packets = 1;
    f.bytes = 1100;
    f.payload_bytes = 1000;
    b.flowlets.push_back(f);
  }
  std::string out, scratch;
  EXPECT_TRUE(store::compress_stored(b, -1, out, scratch));
  return out;
}

// Waits for `n` passes that start after the call (the snapshot is replaced once per pass); false after 60 s
// without them (a hung analysis thread), never a timing assertion.
bool wait_passes(const daemon::LiveAnalysis& la, int n) {
  auto last = la.latest();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int seen = 0; seen < n;) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (auto cur = la.latest(); cur != last) {
      last = cur;
      ++seen;
    }
  }
  return true;
}

}  // namespace

TEST(LiveAnalysisShed, EachCauseIsCountedUnderItsOwnName) {
  TmpDir dir;
  daemon::Settings s;
  s.data_dir = dir.path;
  s.analysis_interval_ms = 20;
  s.analysis_max_events = 4000;  // pending queue 2,000 flowlets; 4,000 transfers; 1,024 connections
  daemon::LiveAnalysis la(s, store::OwnTraffic{}, [] {
    return std::map<std::string, std::string>{{"10.0.0.1", "a"}, {"10.0.0.2", "b"}};
  });

  // Pending queue full: 1,500 fit, the next 1,000 would pass 2,000 and are refused whole.
  la.feed(stored_batch(1500, 0, true), 1500);
  la.feed(stored_batch(1000, 2000, true), 1000);
  auto d = la.dropped_by_cause();
  EXPECT_EQ(d.queue_full, 1000u);
  EXPECT_EQ(d.conn_table_full, 0u);
  EXPECT_EQ(d.xfer_bound, 0u);
  EXPECT_EQ(la.dropped(), 1000u);

  std::jthread analysis([&](std::stop_token st) { la.run(st); });
  // Connection table full: the 1,500 connections meet a table of 1,024; the rest is refused.
  ASSERT_TRUE(wait_passes(la, 2));
  d = la.dropped_by_cause();
  EXPECT_EQ(d.queue_full, 1000u);
  EXPECT_EQ(d.conn_table_full, 1500u - 1024u);
  EXPECT_EQ(d.xfer_bound, 0u);

  // Transfer bound: 1,024 kept, then 2 x 1,900 more on a known connection pass 4,000; the oldest go.
  la.feed(stored_batch(1900, 0, false), 1900);
  ASSERT_TRUE(wait_passes(la, 2));
  EXPECT_EQ(la.dropped_by_cause().xfer_bound, 0u);
  la.feed(stored_batch(1900, 0, false), 1900);
  ASSERT_TRUE(wait_passes(la, 2));
  d = la.dropped_by_cause();
  EXPECT_EQ(d.queue_full, 1000u);
  EXPECT_EQ(d.conn_table_full, 1500u - 1024u);
  EXPECT_GT(d.xfer_bound, 0u);
  EXPECT_LE(la.latest()->events, 4000u);
  EXPECT_EQ(d.undecodable, 0u);
  EXPECT_EQ(la.dropped(), d.queue_full + d.conn_table_full + d.xfer_bound);
}
