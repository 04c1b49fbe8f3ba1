// The analysis' input boundary (feed.hpp): a flowlet becomes the same event whichever way it enters, the
// daemon's binary path (FlowletFeed) or the offline text path (flow_event, then add_event).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "feed.hpp"
#include "synth.hpp"

using namespace netprism;
using namespace netprism::analysis;

namespace {

constexpr uint64_t kSec = 1'000'000'000ull;

Flowlet flowlet_of(const FlowEvent& e) {
  Flowlet f{};
  auto s = parse_addr(e.src), d = parse_addr(e.dst);
  EXPECT_TRUE(s && d) << e.src << " " << e.dst;
  std::memcpy(f.key.saddr, s->data(), 16);
  std::memcpy(f.key.daddr, d->data(), 16);
  f.key.family = is_v4_mapped(f.key.saddr) ? 4 : 6;
  f.key.sport = e.src_port;
  f.key.dport = e.dst_port;
  f.key.qpn = e.qpn;
  f.key.proto = e.proto;
  f.key.dir = static_cast<uint8_t>(e.dir);
  f.first_ns = e.first_ns;
  f.last_ns = e.last_ns;
  f.bytes = e.bytes;
  f.payload_bytes = e.payload_bytes;
  f.packets = e.packets;
  f.tcp_flags = e.tcp_flags;
  return f;
}

std::string documents(const Result& r) {
  std::string out;
  for (const auto& j : r.jobs) out += full(j).dump() + "\n";
  return out;
}

}  // namespace

TEST(AnalysisFeed, FlowEventOfAFlowletCarriesEveryField) {
  FlowEvent want;
  want.observer = "n1";
  want.src = "10.0.0.1";
  want.dst = "fd00::2";
  want.src_port = 40001;
  want.dst_port = 29500;
  want.qpn = 7;
  want.proto = 1;
  want.dir = 1;
  want.tcp_flags = 0x11;
  want.first_ns = 100;
  want.last_ns = 200;
  want.bytes = 3000;
  want.payload_bytes = 2000;
  want.packets = 3;
  FlowEvent got = flow_event("n1", flowlet_of(want));
  EXPECT_EQ(got.observer, want.observer);
  EXPECT_EQ(got.src, want.src);  // IPv4 as a dotted quad, never v4-mapped
  EXPECT_EQ(got.dst, want.dst);
  EXPECT_TRUE(static_cast<const EventFields&>(got) == want);  // every field but the names
  EXPECT_FALSE(is_v6(got.src));
  EXPECT_TRUE(is_v6(got.dst));
  EXPECT_EQ(got.sampled_1_in, 0u);  // a burst the probe saw whole
  Flowlet sample = flowlet_of(want);
  sample.end_reason = NP_END_SAMPLE;  // one 1:3 packet sample (sFlow): packets holds N
  EXPECT_EQ(flow_event("n1", sample).sampled_1_in, 3u);
}

// A RoCE burst of acknowledgements only (the responder's NIC answering the other direction's data) carries
// no data, as a pure TCP ACK: it stays an event (connection activity) with no payload. One that mixes data
// and acknowledgements keeps its payload.
TEST(AnalysisFeed, RoceAcknowledgementsAloneCarryNoData) {
  FlowEvent e;
  e.observer = "n1";
  e.src = "10.0.0.1";
  e.dst = "10.0.0.2";
  e.dst_port = NP_ROCE_UDP_PORT;
  e.qpn = 21;
  e.proto = NP_PROTO_ROCE;
  e.dir = NP_DIR_EGRESS;
  e.first_ns = 100;
  e.last_ns = 200;
  e.bytes = 8 * 48;
  e.payload_bytes = 8 * 20;  // BTH + AETH + ICRC
  e.packets = 8;
  Flowlet f = flowlet_of(e);
  f.roce_ops[NP_ROCE_ACK] = 8;
  FlowEvent acks = flow_event("n1", f);
  EXPECT_EQ(acks.payload_bytes, 0u);
  EXPECT_EQ(acks.bytes, 8u * 48);  // still counted on the wire
  EXPECT_EQ(acks.packets, 8u);
  f.packets = 9;
  f.payload_bytes += 1040;
  f.roce_ops[NP_ROCE_SEND] = 1;  // and one SEND: data
  EXPECT_EQ(flow_event("n1", f).payload_bytes, 8u * 20 + 1040);
  f.key.proto = NP_PROTO_UDP;  // the rule is RoCE's: other protocols' counts are never read as ACKs
  f.packets = 8;
  EXPECT_EQ(flow_event("n1", f).payload_bytes, 8u * 20 + 1040);
}

// The daemon adds each stored batch's flowlets through FlowletFeed (ids cached by binary address, netprism's
// own traffic skipped); `netprism analyze` and the replays go through text. Every pass must agree.
TEST(AnalysisFeed, BinaryAndTextPathsGiveTheSameStreamingAnalysis) {
  synth::Spec s;
  s.both_observers = true;
  s.iters = 20;
  Input in;
  synth::generate(s, in);
  std::stable_sort(in.events.begin(), in.events.end(),
                   [](const FlowEvent& a, const FlowEvent& b) { return a.last_ns < b.last_ns; });
  constexpr uint16_t kOwnPort = 7470;  // an agent's own traffic, which the daemon leaves out
  FlowEvent own = in.events.front();
  own.dst_port = kOwnPort;
  own.payload_bytes = 1 << 20;
  in.events.insert(in.events.begin() + static_cast<long>(in.events.size() / 2), own);

  StreamingAnalysis binary, text;
  FlowletFeed feed(binary);
  binary.set_addr_nodes(in.addr_node);
  text.set_addr_nodes(in.addr_node);
  auto skip = [&](const Flowlet& f) { return f.key.dport == kOwnPort; };
  uint64_t t = in.events.front().last_ns + kSec;
  std::size_t i = 0, passes = 0, added = 0;
  while (i < in.events.size()) {
    // One "batch" per run of events with the same observer, as an agent's batch holds one node's flowlets.
    while (i < in.events.size() && in.events[i].last_ns <= t) {
      std::vector<Flowlet> batch;
      const std::string& observer = in.events[i].observer;
      for (; i < in.events.size() && in.events[i].last_ns <= t && in.events[i].observer == observer; ++i) {
        batch.push_back(flowlet_of(in.events[i]));
        if (!skip(batch.back())) add_event(text, flow_event(observer, batch.back()));
      }
      added += feed.add(observer, batch, skip);
    }
    ASSERT_EQ(documents(binary.pass(t)), documents(text.pass(t))) << "pass at " << t;
    ++passes;
    t += kSec;
  }
  EXPECT_EQ(added, in.events.size() - 1);
  EXPECT_EQ(binary.stats().events, text.stats().events);
  Result last = binary.pass(t);
  ASSERT_EQ(last.jobs.size(), 1u);
  EXPECT_GE(last.jobs[0].iterations.size(), 15u);
  EXPECT_GT(passes, 2u);
}
