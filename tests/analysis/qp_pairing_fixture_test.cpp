// QP pairing (aggregator/analysis/counters.hpp) on QP tables in the kernel's documented RDMA netlink format:
// every node's table is a RDMA_NLDEV_CMD_RES_QP_GET dump built attribute by attribute from
// <rdma/rdma_netlink.h> (as res_get_common_dumpit + fill_res_qp_entry write it) and decoded by the agent's
// own parser, then paired across nodes.
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "counters.hpp"
#include "netprism/flowlet.h"
#include "qp_table_fixture.hpp"

using namespace netprism;
using namespace netprism::analysis;
using netprism::test::kQptGsi;
using netprism::test::qp_table;

namespace {

void append(std::vector<NodeQp>& to, std::vector<NodeQp> from) {
  to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

TEST(QpPairingFixture, PairsAcrossNodesByQpnAndSkipsDatagramQps) {
  std::vector<NodeQp> qps;
  append(qps, qp_table("n0", {{0x11, 0x2a, 100, 200}, {.lqpn = 1, .type = kQptGsi}}, 1000));
  append(qps, qp_table("n1", {{0x2a, 0x11, 200, 100}}, 1000));
  append(qps, qp_table("n2", {{0x33, 0x999, 5, 6}}, 1000));  // its peer has no agent
  QpPairing p = pair_qps(qps, {}, {});
  ASSERT_EQ(p.links.size(), 1u);
  EXPECT_EQ(p.links[0].a, "n0");
  EXPECT_EQ(p.links[0].b, "n1");
  EXPECT_EQ(p.links[0].qpn_a, 0x11u);
  EXPECT_EQ(p.links[0].qpn_b, 0x2au);
  EXPECT_FALSE(p.links[0].by_address);
  EXPECT_FALSE(p.links[0].closed);
  EXPECT_EQ(p.unpaired, 1u);
  EXPECT_TRUE(p.ambiguous.empty());
}

TEST(QpPairingFixture, ClosedWhenLaterReadsNoLongerListTheQps) {
  std::vector<NodeQp> qps;
  append(qps, qp_table("n0", {{17, 18, 1, 1}}, 1000));
  append(qps, qp_table("n1", {{18, 17, 1, 1}}, 1000));
  EXPECT_FALSE(pair_qps(qps, {}, {{"n0", 1000}, {"n1", 1000}}).links[0].closed);
  EXPECT_TRUE(pair_qps(qps, {}, {{"n0", 2000}, {"n1", 2000}}).links[0].closed);
  EXPECT_FALSE(pair_qps(qps, {}, {{"n0", 2000}, {"n1", 1000}}).links[0].closed);  // n1 still has it
}

// Soft-RoCE numbers QPs from 17 on every device: two node pairs that connected alike carry the same numbers,
// and the QPNs alone cannot tell n0's peer from n2's. The pairing leaves them ambiguous; the counters source
// resolves them by which nodes' counters move together (n0 sends while n1 receives, n2 while n3).
TEST(QpPairingFixture, SameQpnsOnTwoNodePairsResolvedByCounters) {
  std::vector<NodeQp> qps;
  for (const char* n : {"n0", "n1", "n2", "n3"}) append(qps, qp_table(n, {{17, 17, 0, 0}}, 1000));
  QpPairing p = pair_qps(qps, {}, {});
  EXPECT_TRUE(p.links.empty());
  ASSERT_EQ(p.ambiguous.size(), 4u);
  EXPECT_EQ(p.ambiguous[0].candidates.size(), 3u);

  Input in;
  in.qps = qps;
  const uint64_t ms = 1'000'000;
  for (int k = 0; k < 20; ++k) {  // 20 intervals of 10 ms, n0 -> n1 in even ones, n2 -> n3 in odd ones
    uint64_t t = 1'000 * ms + static_cast<uint64_t>(k) * 10 * ms;
    auto burst = [&](const char* node, uint64_t x, uint64_t r) {
      in.rdma_bursts.push_back({node, {"rxe0", 1, t, t + 10 * ms, x, r, 0, 0}});
    };
    if (k % 2 == 0)
      burst("n0", 1 << 20, 0), burst("n1", 0, 1 << 20);
    else
      burst("n2", 1 << 20, 0), burst("n3", 0, 1 << 20);
  }
  std::set<std::pair<std::string, std::string>> pairs;
  uint64_t bytes = 0;
  for (const auto& e : counter_events(in)) {
    EXPECT_TRUE(e.from_counters);
    EXPECT_EQ(e.proto, NP_PROTO_ROCE);
    pairs.insert({e.src, e.dst});
    bytes += e.bytes;
  }
  EXPECT_EQ(pairs, (std::set<std::pair<std::string, std::string>>{{"n0", "n1"}, {"n2", "n3"}}));
  EXPECT_EQ(bytes, 20ull << 20);  // every byte sent attributed, none twice
}

TEST(QpPairingFixture, CmAddressesDecideBetweenEqualQpns) {
  std::vector<NodeQp> qps;
  for (const char* n : {"n0", "n1", "n2", "n3"}) append(qps, qp_table(n, {{17, 17, 0, 0}}, 1000));
  const std::map<std::string, std::string> addr_node = {
      {"10.0.0.1", "n0"}, {"10.0.0.2", "n1"}, {"10.0.0.3", "n2"}, {"10.0.0.4", "n3"}};
  // The CM table's addresses (rdma_cm users): complete_qp_table fills them by device and local QPN.
  const char* peer[] = {"10.0.0.2", "10.0.0.1", "10.0.0.4", "10.0.0.3"};
  for (size_t i = 0; i < qps.size(); ++i) qps[i].qp.dst_addr = peer[i];
  QpPairing p = pair_qps(qps, addr_node, {});
  ASSERT_EQ(p.links.size(), 2u);
  EXPECT_EQ(p.links[0].a + p.links[0].b, "n0n1");
  EXPECT_EQ(p.links[1].a + p.links[1].b, "n2n3");
  EXPECT_TRUE(p.links[0].by_address);
  EXPECT_TRUE(p.ambiguous.empty());
}

// Two peers at once: the port counters alone cannot split n0's bytes between n1 and n2 (both receive); the
// PSN each QP advanced by between table reads does.
TEST(QpPairingFixture, BytesSentWhileNoQpAdvancedCountAsNoDataAndAreNeverDropped) {
  // n0 and n1 exchange 1 MiB each way in the first 30 ms; then n1 alone sends 1 MiB (30-60 ms), which n0's
  // port acknowledges with 400 bytes a bin (40-70 ms: no PSN of n0 advanced within a bin of them).
  Input in;
  const uint64_t ms = 1'000'000, t0 = 1'000 * ms;
  uint32_t p0 = 1000, p1 = 5000;
  for (int k = 0; k <= 7; ++k) {
    uint64_t t = t0 + static_cast<uint64_t>(k) * 10 * ms;
    append(in.qps, qp_table("n0", {{0x100, 0x200, p0, 0}}, t));
    append(in.qps, qp_table("n1", {{0x200, 0x100, p1, 0}}, t));
    if (k == 7) break;
    const bool both = k < 3, n1_sends = k < 6, acks = k >= 4;
    p0 += both ? 86 : 0;
    p1 += n1_sends ? 86 : 0;
    uint64_t x0 = both ? 349'525 : acks ? 400 : 0, x1 = n1_sends ? 349'525 : 0;
    if (x0) in.rdma_bursts.push_back({"n0", {"rxe0", 1, t, t + 10 * ms, x0, x1, 0, 0}});
    if (x1 && !x0) in.rdma_bursts.push_back({"n0", {"rxe0", 1, t, t + 10 * ms, 0, x1, 0, 0}});
    if (x0 || x1) in.rdma_bursts.push_back({"n1", {"rxe0", 1, t, t + 10 * ms, x1, x0, 0, 0}});
  }
  uint64_t data = 0, no_data = 0, last_data_end = 0;
  for (const auto& e : counter_events(in))
    if (e.src == "n0") {
      (e.payload_bytes ? data : no_data) += e.bytes;
      if (e.payload_bytes) last_data_end = std::max(last_data_end, e.last_ns);
    }
  EXPECT_NEAR(static_cast<double>(data), 3 * 349'525.0, 1.0);  // the data
  EXPECT_NEAR(static_cast<double>(no_data), 1'200.0, 1.0);     // the ACKs: counted, as no data
  EXPECT_LE(last_data_end, t0 + 30 * ms + 1 * ms);             // and they time nothing
}

TEST(QpPairingFixture, PacketSizesTellDataFromAcksWherePsnsAreReadApartFromTheWire) {
  // Soft-RoCE's timing: n0's QP advanced its PSN by 279 packets when the rank posted them (0-10 ms), and its
  // interface sent them 30-60 ms (1075 B a packet: data). n1's port meanwhile sent only acknowledgements (62
  // B a packet), and so did n0's at 80-90 ms -- though no PSN says so.
  Input in;
  const uint64_t ms = 1'000'000, t0 = 1'000 * ms;
  uint32_t p0 = 1000;
  for (int k = 0; k <= 10; ++k) {
    uint64_t t = t0 + static_cast<uint64_t>(k) * 10 * ms;
    append(in.qps, qp_table("n0", {{0x100, 0x200, p0, 0}}, t));
    append(in.qps, qp_table("n1", {{0x200, 0x100, 2000, 0}}, t));
    if (k == 10) break;
    if (k == 0) p0 += 279;
    if (k >= 3 && k <= 5) {
      in.rdma_bursts.push_back({"n0", {"rxe0", 1, t, t + 10 * ms, 100'000, 1'860, 93, 30}});
      in.rdma_bursts.push_back({"n1", {"rxe0", 1, t, t + 10 * ms, 1'860, 100'000, 30, 93}});
    }
    if (k == 8) in.rdma_bursts.push_back({"n0", {"rxe0", 1, t, t + 10 * ms, 620, 0, 10, 0}});
  }
  std::map<std::string, uint64_t> data, no_data;
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& e : counter_events(in)) {
    (e.payload_bytes ? data : no_data)[e.src] += e.bytes;
    if (e.payload_bytes) first = std::min(first, e.first_ns), last = std::max(last, e.last_ns);
  }
  EXPECT_NEAR(static_cast<double>(data["n0"]), 300'000.0, 1.0);  // the data, where the wire carried it
  EXPECT_GE(first, t0 + 30 * ms);
  EXPECT_LE(last, t0 + 60 * ms);
  EXPECT_NEAR(static_cast<double>(no_data["n0"]), 620.0, 1.0);  // acknowledgements: counted, as no data
  EXPECT_EQ(data["n1"], 0u);
  EXPECT_NEAR(static_cast<double>(no_data["n1"]), 5'580.0, 1.0);
}

TEST(QpPairingFixture, PacketsReadApartFromTheirBytesAddNoBytes) {
  // A port that counts bytes had its packets read in one interval and their bytes in the next (soft-RoCE
  // VMs: two files read ms apart): 0 bytes beside 20 packets is not 20 x MTU bytes more.
  Input in;
  const uint64_t ms = 1'000'000, t0 = 1'000 * ms;
  uint32_t p0 = 1000;
  const uint64_t bytes[] = {50'000, 0, 30'000}, packets[] = {45, 20, 0};
  for (int k = 0; k <= 4; ++k) {
    uint64_t t = t0 + static_cast<uint64_t>(k) * 10 * ms;
    append(in.qps, qp_table("n0", {{0x100, 0x200, p0, 0}}, t));
    append(in.qps, qp_table("n1", {{0x200, 0x100, 2000, 0}}, t));
    if (k >= 3) continue;
    p0 += static_cast<uint32_t>(packets[k]);
    in.rdma_bursts.push_back({"n0", {"rxe0", 1, t, t + 10 * ms, bytes[k], 0, packets[k], 0}});
    in.rdma_bursts.push_back({"n1", {"rxe0", 1, t, t + 10 * ms, 0, bytes[k], 0, packets[k]}});
  }
  uint64_t sent = 0;
  for (const auto& e : counter_events(in))
    if (e.src == "n0") sent += e.bytes;
  EXPECT_NEAR(static_cast<double>(sent), 80'000.0, 1.0);
}

TEST(QpPairingFixture, ANodeWhoseProbeSeesRoceGetsNoCounterTransfers) {
  // n0's probe saw its RoCE to n1 (soft-RoCE); its QP table also pairs a QP with n2 (four soft-RoCE nodes'
  // QPNs all start at 17, so a stale or wrong match is easy). n0's port counts the probe's traffic: split
  // to n2 it would be counted twice, as a connection that never carried it.
  Input in;
  const uint64_t ms = 1'000'000, t0 = 1'000 * ms;
  for (int k = 0; k <= 3; ++k) {
    uint64_t t = t0 + static_cast<uint64_t>(k) * 10 * ms;
    append(in.qps, qp_table("n0", {{0x100, 0x200, 1000u + 50u * static_cast<uint32_t>(k), 0}}, t));
    append(in.qps, qp_table("n2", {{0x200, 0x100, 2000, 0}}, t));
    if (k < 3) in.rdma_bursts.push_back({"n0", {"rxe0", 1, t, t + 10 * ms, 200'000, 0, 190, 0}});
  }
  FlowEvent probe;
  probe.observer = "n0";
  probe.src = "n0";
  probe.dst = "n1";
  probe.proto = NP_PROTO_ROCE;
  probe.bytes = 600'000;
  in.events.push_back(probe);
  for (const auto& e : counter_events(in)) EXPECT_NE(e.src, "n0") << e.dst;
}

TEST(QpPairingFixture, PsnAdvanceSplitsOneNodesBytesBetweenPeers) {
  Input in;
  const uint64_t ms = 1'000'000, t0 = 1'000 * ms;
  uint32_t to1 = 1000, to2 = 5000;  // n0's send PSNs towards n1 and n2
  for (int k = 0; k <= 10; ++k) {
    uint64_t t = t0 + static_cast<uint64_t>(k) * 10 * ms;
    append(in.qps, qp_table("n0", {{0x100, 0x200, to1, 0}, {0x101, 0x300, to2, 0}}, t));
    append(in.qps, qp_table("n1", {{0x200, 0x100, 0, 0}}, t));
    append(in.qps, qp_table("n2", {{0x300, 0x101, 0, 0}}, t));
    if (k == 10) break;
    to1 += 3 * 256;  // 3 MiB to n1 and 1 MiB to n2 per interval, in 4096-byte packets
    to2 += 256;
    in.rdma_bursts.push_back({"n0", {"rxe0", 1, t, t + 10 * ms, 4u << 20, 0, 1024, 0}});
    in.rdma_bursts.push_back({"n1", {"rxe0", 1, t, t + 10 * ms, 0, 3u << 20, 0, 768}});
    in.rdma_bursts.push_back({"n2", {"rxe0", 1, t, t + 10 * ms, 0, 1u << 20, 0, 256}});
  }
  std::map<std::string, uint64_t> to;
  for (const auto& e : counter_events(in)) to[e.dst] += e.bytes;
  EXPECT_NEAR(static_cast<double>(to["n1"]), 30.0 * (1 << 20), 0.01 * 30 * (1 << 20));
  EXPECT_NEAR(static_cast<double>(to["n2"]), 10.0 * (1 << 20), 0.01 * 10 * (1 << 20));
}
