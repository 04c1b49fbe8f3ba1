// Who is cut for flooding (aggregator/daemon/peer_cut.hpp), offline with a fake clock: an ACK-clocked agent
// replaying its spool at full speed -- its whole window deferred on every connection, reconnecting after
// each ACK timeout -- is never cut, even at the widest default batches; a sender that keeps sending what is
// deferred is cut once one connection passes conn_bytes, or its key 4x that across reconnects; cool-downs
// double; the tuple helpers only ever name a live TCP connection.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/peer_cut.hpp"

using namespace netprism::daemon;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kMiB = 1u << 20;
// The widest batch of a default agent: 4,096 flowlets at their widest encoding (195 B), plus a header.
constexpr uint64_t kWidestBatch = 4096 * 195 + 512;
constexpr int kWindow = 16;  // agent::DeliveryOptions::window

// "PREFIX" N (appended, not operator+: GCC 12's -Wrestrict misfires on a literal + std::string).
std::string id(const char* prefix, int n) {
  std::string s = prefix;
  s += std::to_string(n);
  return s;
}

TEST(PeerCut, SpoolReplayOfAConformingAgentIsNeverCut) {
  PeerCut cut({});
  auto t = PeerCut::Clock::time_point{} + 1h;
  // Ten minutes of the worst case: every batch of the window deferred on every connection, a new connection
  // after each 5 s ACK timeout plus the 100 ms back-off, batches sent 1 ms apart.
  for (int conn = 0; conn < 120; ++conn) {
    const std::string conn_id = id("conn-", conn);
    for (int b = 0; b < kWindow; ++b) {
      EXPECT_FALSE(cut.deferred(conn_id, "node-a", kWidestBatch, t))
          << "connection " << conn << " batch " << b;
      t += 1ms;
    }
    t += 5100ms;
  }
  EXPECT_EQ(cut.cuts("node-a"), 0u);
}

// The same agent with its window in the pipeline as well: each connection holds its 16 batches
// unanswered for a while, the daemon answers them (or defers them), the agent sends more only when answered.
TEST(PeerCut, AConformingWindowInThePipelineIsNeverCut) {
  PeerCut cut({});
  auto t = PeerCut::Clock::time_point{} + 1h;
  uint64_t seq = 0;
  for (int round = 0; round < 1000; ++round) {
    const uint64_t first = seq;
    for (int b = 0; b < kWindow; ++b)
      EXPECT_FALSE(cut.admitting("conn", "node-a", kWidestBatch, seq++, t)) << "round " << round;
    t += 50ms;
    cut.answered_upto(round % 2 ? seq : first + kWindow / 2);  // all answered, or half of them by now
    if (round % 2 == 0) cut.answered_upto(seq);
  }
  EXPECT_EQ(cut.cuts("node-a"), 0u);
}

TEST(PeerCut, AFloodOfMaximumMessagesIsCutAtItsSecondWhileTheFirstIsUnanswered) {
  PeerCut cut({});
  auto t = PeerCut::Clock::time_point{} + 1h;
  EXPECT_FALSE(cut.admitting("c1", "hostile", 16 * kMiB, 0, t));
  auto cd = cut.admitting("c1", "hostile", 16 * kMiB, 1, t + 10ms);
  ASSERT_TRUE(cd);
  EXPECT_TRUE(cut.is_cut("hostile", t + 10ms));
  EXPECT_FALSE(cut.is_cut("hostile", t + 10ms + *cd));
  // What was queued before the cut and is deferred now does not cut it again.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(cut.deferred("c1", "hostile", 16 * kMiB, t + 20ms));
  EXPECT_EQ(cut.cuts("hostile"), 1u);
  // Answered in time, the same two messages are no flood.
  PeerCut other({});
  EXPECT_FALSE(other.admitting("c1", "agent", 16 * kMiB, 0, t));
  other.answered_upto(1);
  EXPECT_FALSE(other.admitting("c1", "agent", 16 * kMiB, 1, t + 10ms));
}

TEST(PeerCut, OneConnectionOverItsBoundIsCut) {
  PeerCut cut({});
  auto t = PeerCut::Clock::time_point{} + 1h;
  EXPECT_FALSE(cut.deferred("c1", "hostile", 16 * kMiB, t));
  auto cd = cut.deferred("c1", "hostile", 16 * kMiB, t + 1s);  // the second maximum-size message
  ASSERT_TRUE(cd);
  EXPECT_EQ(*cd, 60s);
  // Another key, deferred on its own connection at the same time, is not affected.
  EXPECT_FALSE(cut.deferred("c2", "other", 8 * kMiB, t + 1s));
}

TEST(PeerCut, ReconnectingToResetTheCountIsCaughtPerKey) {
  PeerCut cut({});
  auto t = PeerCut::Clock::time_point{} + 1h;
  // 12 MiB per connection (under conn_bytes), a new connection every 500 ms: 64 MiB passes within 3 s.
  std::optional<std::chrono::seconds> cd;
  int n = 0;
  for (; n < 20 && !cd; ++n) cd = cut.deferred(id("c", n), "hostile", 12 * kMiB, t + n * 500ms);
  ASSERT_TRUE(cd);
  EXPECT_EQ(n, 6) << "cut after the 6th connection (72 MiB > 4 x 16 MiB)";
}

TEST(PeerCut, CoolDownsDoubleUpToTheCapThenStartOver) {
  PeerCutPolicy p;
  p.cooldown = 60s;
  p.cooldown_max = 600s;
  PeerCut cut(p);
  auto t = PeerCut::Clock::time_point{} + 1h;
  std::vector<int64_t> got;
  for (int i = 0; i < 6; ++i) {
    auto cd = cut.deferred(id("c", i), "hostile", 17 * kMiB, t);
    ASSERT_TRUE(cd);
    got.push_back(cd->count());
    t += *cd + 1s;  // it floods again as soon as its cool-down is over
  }
  EXPECT_EQ(got, (std::vector<int64_t>{60, 120, 240, 480, 600, 600}));
  // Quiet for longer than the cap after its last cool-down: the next cut is a first one again.
  t += 600s;
  auto cd = cut.deferred("late", "hostile", 17 * kMiB, t);
  ASSERT_TRUE(cd);
  EXPECT_EQ(*cd, 60s);
}

TEST(PeerCut, ZeroNeverCuts) {
  PeerCutPolicy p;
  p.conn_bytes = 0;
  PeerCut cut(p);
  auto t = PeerCut::Clock::time_point{} + 1h;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(cut.deferred("c", "hostile", 16 * kMiB, t + i * 10ms));
  EXPECT_FALSE(cut.seen("c", "hostile", t));
}

TEST(PeerCut, TakesEveryConnectionOfTheKeyOnly) {
  PeerCut cut({});
  auto t = PeerCut::Clock::time_point{} + 1h;
  EXPECT_TRUE(cut.seen("a1", "a", t));
  EXPECT_FALSE(cut.seen("a1", "a", t + 1ms));
  EXPECT_TRUE(cut.seen("a2", "a", t));
  EXPECT_TRUE(cut.seen("b1", "b", t));
  cut.remember("a1", {7, "x"});
  cut.remember("a2", {8, "y"});
  cut.remember("b1", {9, "z"});
  auto conns = cut.take_connections("a");
  ASSERT_EQ(conns.size(), 2u);
  EXPECT_EQ(conns[0].fd + conns[1].fd, 15);
  EXPECT_EQ(cut.tracked(), 1u);
  // Quiet connections are forgotten after two periods.
  EXPECT_TRUE(cut.seen("c1", "c", t + 11s));
  EXPECT_EQ(cut.tracked(), 1u) << "b1 was quiet for 11 s";
}

// tcp_tuple names only a connected TCP socket; shut_connection shuts only the connection it was given.
TEST(PeerCut, ShutsOnlyTheConnectionItRecorded) {
  int lst = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(lst, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lst, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lst, 4), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(lst, reinterpret_cast<sockaddr*>(&a), &len), 0);
  EXPECT_EQ(tcp_tuple(lst, ""), "") << "a listening socket is no connection";
  EXPECT_EQ(tcp_tuple(-1, ""), "");
  int cl = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(cl, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  int srv = ::accept(lst, nullptr, nullptr);
  ASSERT_GE(srv, 0);
  const std::string tuple = tcp_tuple(srv, "127.0.0.1");
  EXPECT_NE(tuple, "");
  EXPECT_EQ(tcp_tuple(srv, "10.0.0.1"), "") << "the message's Peer-Address must match";
  // A different tuple (another connection on this fd number) is left alone; the recorded one is shut.
  std::string other = tuple;
  other += "x";
  EXPECT_FALSE(shut_connection({srv, other}));
  EXPECT_TRUE(shut_connection({srv, tuple}));
  char c;
  EXPECT_EQ(::read(cl, &c, 1), 0) << "the peer sees the connection end";
  for (int fd : {cl, srv, lst}) ::close(fd);
}

}  // namespace
