// Stage 1: node mapping, observer dedupe, data vs. pure-ACK rows.
#include <gtest/gtest.h>

#include "netprism/flowlet.h"
#include "stages.hpp"
#include "synth.hpp"

using namespace netprism::analysis;

namespace {
FlowEvent ev(std::string obs, std::string src, std::string dst, uint64_t t0, uint64_t payload, int8_t dir) {
  FlowEvent e;
  e.observer = std::move(obs);
  e.src = std::move(src);
  e.dst = std::move(dst);
  e.src_port = 1000;
  e.dst_port = 2000;
  e.proto = NP_PROTO_TCP;
  e.first_ns = t0;
  e.last_ns = t0 + 10;
  e.payload_bytes = payload;
  e.bytes = payload + 52;
  e.packets = 1;
  e.dir = dir;
  return e;
}
}  // namespace

TEST(AnalysisNormalize, KeepsOnlyTheSendersViewOfEachFlowDirection) {
  Input in;
  in.addr_node = {{"10.0.0.1", "a"}, {"10.0.0.2", "b"}};
  in.events.push_back(ev("b", "10.0.0.1", "10.0.0.2", 100, 5000, NP_DIR_INGRESS));  // receiver's view
  in.events.push_back(ev("a", "10.0.0.1", "10.0.0.2", 90, 5000, NP_DIR_EGRESS));    // sender's view
  FlowEvent acks = ev("a", "10.0.0.2", "10.0.0.1", 95, 0, NP_DIR_INGRESS);          // pure ACKs
  std::swap(acks.src_port, acks.dst_port);
  in.events.push_back(acks);
  Normalized n = normalize(in);
  ASSERT_EQ(n.xfers.size(), 1u);
  EXPECT_EQ(n.xfers[0].t0, 90u);
  EXPECT_EQ(n.nodes[n.xfers[0].src], "a");
  EXPECT_EQ(n.nodes[n.xfers[0].dst], "b");
  ASSERT_EQ(n.conns.size(), 1u);  // both directions are one connection
  EXPECT_EQ(n.conns[0].bytes_ab + n.conns[0].bytes_ba, 5000u);
}

TEST(AnalysisNormalize, UnmappedAddressesAreNodesAndCsvAckRowsCarryNoData) {
  Input in;
  FlowEvent data = ev("", "10.0.0.1", "10.0.0.2", 0, 0, -1);
  data.bytes = 15000;
  data.packets = 10;
  FlowEvent acks = ev("", "10.0.0.2", "10.0.0.1", 5, 0, -1);
  acks.bytes = 52 * 5;
  acks.packets = 5;
  in.events = {data, acks};
  Normalized n = normalize(in);
  ASSERT_EQ(n.xfers.size(), 1u);
  EXPECT_EQ(n.nodes[n.xfers[0].src], "10.0.0.1");
  EXPECT_EQ(n.xfers[0].bytes, 15000u);
}

TEST(AnalysisNormalize, DoubleObservationGivesTheSameAnalysisAsSingle) {
  synth::Spec s;
  Input one, two;
  synth::generate(s, one);
  s.both_observers = true;
  synth::generate(s, two);
  Normalized a = normalize(one), b = normalize(two);
  EXPECT_EQ(a.xfers.size(), b.xfers.size());
  auto ra = analyze(one), rb = analyze(two);
  ASSERT_EQ(ra.jobs.size(), 1u);
  ASSERT_EQ(rb.jobs.size(), 1u);
  EXPECT_EQ(ra.jobs[0].iterations.size(), rb.jobs[0].iterations.size());
  EXPECT_EQ(ra.jobs[0].parallelism.stages, rb.jobs[0].parallelism.stages);
}
