// The probe's parser and flow key, table-driven in the katran style: each row is an input packet (built by
// PacketBuilder) and what the probe must make of it (the flow key and sizes it records, or the one counter
// that says why it skipped the packet). Every row runs through np_tc_ingress, np_tc_egress and np_xdp with
// BPF_PROG_TEST_RUN, and the probe must always pass the packet on. RoCE rows are fixtures built from the
// InfiniBand BTH format (no RDMA hardware here).
#include <arpa/inet.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bpf/packet_builder.hpp"
#include "bpf/prog_run.hpp"
#include "netprism/addr.hpp"
#include "probe.hpp"
#include "support/privileged.hpp"

namespace netprism::test {
namespace {

using agent::Probe;
using agent::ProbeOptions;

struct Expect {
  uint32_t reason = NP_PARSE_OK_;  // an np_counter index when the packet must be skipped
  static constexpr uint32_t NP_PARSE_OK_ = 0xffffffffu;
  uint8_t family = 4;
  std::string src, dst;
  uint16_t sport = 0, dport = 0;
  uint8_t proto = NP_PROTO_TCP;
  uint32_t qpn = 0;
  uint64_t ip_bytes = 0, payload = 0;
  uint16_t tcp_flags = 0;
  int roce_class = -1;
  uint32_t psn = 0;
};

struct Row {
  std::string name;
  std::vector<uint8_t> pkt;
  Expect want;
};

void PrintTo(const Row& r, std::ostream* os) {
  *os << r.name;
}

Expect skip(uint32_t reason) {
  Expect e;
  e.reason = reason;
  return e;
}
Expect flow(uint8_t family, std::string src, std::string dst, uint16_t sport, uint16_t dport, uint8_t proto,
            uint64_t ip_bytes, uint64_t payload) {
  Expect e;
  e.family = family;
  e.src = std::move(src);
  e.dst = std::move(dst);
  e.sport = sport;
  e.dport = dport;
  e.proto = proto;
  e.ip_bytes = ip_bytes;
  e.payload = payload;
  return e;
}
Expect tcpf(Expect e, uint16_t flags) {
  e.tcp_flags = flags;
  return e;
}
Expect roce(Expect e, uint32_t qpn, int cls, uint32_t psn) {
  e.qpn = qpn;
  e.roce_class = cls;
  e.psn = psn;
  return e;
}

using PB = PacketBuilder;
constexpr uint16_t kRoce = NP_ROCE_UDP_PORT;

std::vector<Row> rows() {
  std::vector<Row> r;
  // ---- TCP / UDP over IPv4 and IPv6 ----
  r.push_back({"ipv4_tcp",
               PB().eth().ipv4("10.1.0.1", "10.1.0.2").tcp(40000, 29500, 0x18).payload(1000).build(),
               tcpf(flow(4, "10.1.0.1", "10.1.0.2", 40000, 29500, NP_PROTO_TCP, 1040, 1000), 0x18)});
  r.push_back({"ipv4_options_tcp_options",
               PB().eth().ipv4("10.1.0.1", "10.1.0.2", 2).tcp(1, 2, 0x02, 3).payload(100).build(),
               tcpf(flow(4, "10.1.0.1", "10.1.0.2", 1, 2, NP_PROTO_TCP, 160, 100), 0x02)});
  r.push_back({"ipv4_tcp_ecn_ns_flag", PB().eth().ipv4("10.1.0.1", "10.1.0.2").tcp(5, 6, 0x10).build(),
               tcpf(flow(4, "10.1.0.1", "10.1.0.2", 5, 6, NP_PROTO_TCP, 40, 0), 0x10)});
  r.push_back({"ipv4_udp", PB().eth().ipv4("192.168.7.9", "192.168.7.1").udp(5353, 6000).payload(333).build(),
               flow(4, "192.168.7.9", "192.168.7.1", 5353, 6000, NP_PROTO_UDP, 361, 333)});
  // Ethernet padding of a minimum-size frame is not payload: the IP length says 40.
  r.push_back({"ipv4_tcp_ethernet_padding",
               PB().eth().ipv4("10.1.0.1", "10.1.0.2").tcp(7, 8, 0x10).payload(6).ip_total_length(40).build(),
               tcpf(flow(4, "10.1.0.1", "10.1.0.2", 7, 8, NP_PROTO_TCP, 40, 0), 0x10)});
  r.push_back({"ipv6_tcp", PB().eth().ipv6("fd00::1", "fd00::2").tcp(33000, 22, 0x11).payload(1400).build(),
               tcpf(flow(6, "fd00::1", "fd00::2", 33000, 22, NP_PROTO_TCP, 1460, 1400), 0x11)});
  r.push_back({"ipv6_udp", PB().eth().ipv6("2001:db8::a", "2001:db8::b").udp(1000, 2000).payload(9).build(),
               flow(6, "2001:db8::a", "2001:db8::b", 1000, 2000, NP_PROTO_UDP, 57, 9)});
  r.push_back({"ipv6_hop_by_hop_tcp",
               PB().eth().ipv6("fd00::1", "fd00::2").ipv6_ext(0).tcp(1, 2, 0x04).payload(10).build(),
               tcpf(flow(6, "fd00::1", "fd00::2", 1, 2, NP_PROTO_TCP, 78, 10), 0x04)});
  r.push_back(
      {"ipv6_routing_dstopts_udp",
       PB().eth().ipv6("fd00::1", "fd00::2").ipv6_ext(43).ipv6_ext(60, 1).udp(3, 4).payload(5).build(),
       flow(6, "fd00::1", "fd00::2", 3, 4, NP_PROTO_UDP, 40 + 8 + 16 + 8 + 5, 5)});
  r.push_back({"ipv6_atomic_fragment_udp",
               PB().eth().ipv6("fd00::1", "fd00::2").ipv6_frag(0, false).udp(3, 4).payload(5).build(),
               flow(6, "fd00::1", "fd00::2", 3, 4, NP_PROTO_UDP, 40 + 8 + 8 + 5, 5)});
  // ---- VLAN ----
  r.push_back({"vlan_ipv4_tcp",
               PB().eth().vlan(100).ipv4("10.2.0.1", "10.2.0.2").tcp(1, 2, 0x10).payload(64).build(),
               tcpf(flow(4, "10.2.0.1", "10.2.0.2", 1, 2, NP_PROTO_TCP, 104, 64), 0x10)});
  r.push_back({"qinq_ipv6_udp",
               PB().eth().vlan(10, 0x88a8).vlan(20).ipv6("fd00::5", "fd00::6").udp(9, 10).payload(1).build(),
               flow(6, "fd00::5", "fd00::6", 9, 10, NP_PROTO_UDP, 49, 1)});
  // ---- RoCEv2: several opcodes and QPs ----
  auto rocev4 = [](uint8_t op, uint32_t qp, uint32_t psn, std::size_t extra) {
    return PB().eth().ipv4("10.3.0.1", "10.3.0.2").udp(49152, kRoce).bth(op, qp, psn).payload(extra).build();
  };
  auto rf = [](uint32_t qp, int cls, uint32_t psn, std::size_t extra) {
    return roce(flow(4, "10.3.0.1", "10.3.0.2", 49152, kRoce, NP_PROTO_ROCE, 20 + 8 + 12 + extra, 12 + extra),
                qp, cls, psn);
  };
  r.push_back({"roce_rc_send_only", rocev4(0x04, 0x000123, 77, 256), rf(0x000123, NP_ROCE_SEND, 77, 256)});
  r.push_back({"roce_rc_send_last_inv", rocev4(0x16, 0x42, 1, 4), rf(0x42, NP_ROCE_SEND, 1, 4)});
  r.push_back({"roce_rc_write_first", rocev4(0x06, 0xabcdef, 0xfffffe, 1024 + 16),
               rf(0xabcdef, NP_ROCE_WRITE, 0xfffffe, 1024 + 16)});
  r.push_back({"roce_rc_write_only_imm", rocev4(0x0b, 0x7, 5, 20), rf(0x7, NP_ROCE_WRITE, 5, 20)});
  r.push_back({"roce_rc_read_request", rocev4(0x0c, 17, 3, 16), rf(17, NP_ROCE_READ, 3, 16)});
  r.push_back({"roce_rc_read_response_only", rocev4(0x10, 18, 3, 4 + 512), rf(18, NP_ROCE_READ, 3, 4 + 512)});
  r.push_back({"roce_rc_ack", rocev4(0x11, 0xffffff, 0x123456, 4), rf(0xffffff, NP_ROCE_ACK, 0x123456, 4)});
  r.push_back({"roce_uc_write_middle", rocev4(0x27, 9, 9, 1024), rf(9, NP_ROCE_WRITE, 9, 1024)});
  r.push_back({"roce_ud_send_only", rocev4(0x64, 1, 0, 40 + 8), rf(1, NP_ROCE_SEND, 0, 48)});
  r.push_back({"roce_cnp_not_a_class", rocev4(0x81, 2, 0, 16), rf(2, -1, 0, 16)});
  r.push_back({"roce_ipv6_vlan",
               PB().eth()
                   .vlan(5)
                   .ipv6("fd00::7", "fd00::8")
                   .udp(1234, kRoce)
                   .bth(0x0a, 0x5555, 42)
                   .payload(8)
                   .build(),
               roce(flow(6, "fd00::7", "fd00::8", 1234, kRoce, NP_PROTO_ROCE, 40 + 8 + 12 + 8, 20), 0x5555,
                    NP_ROCE_WRITE, 42)});
  // UDP *from* 4791 is not RoCE (RoCEv2 is identified by the destination port).
  r.push_back({"udp_from_4791_is_udp",
               PB().eth().ipv4("10.3.0.1", "10.3.0.2").udp(kRoce, 5000).payload(12).build(),
               flow(4, "10.3.0.1", "10.3.0.2", kRoce, 5000, NP_PROTO_UDP, 40, 12)});
  // ---- skipped, each under its own counter ----
  r.push_back({"arp", PB().eth().arp().build(), skip(NP_CNT_NON_IP)});
  r.push_back({"lldp", PB().eth(0x88cc).payload(30).build(), skip(NP_CNT_NON_IP)});
  r.push_back({"icmp", PB().eth().ipv4("10.1.0.1", "10.1.0.2").icmp().build(), skip(NP_CNT_OTHER_L4)});
  r.push_back({"icmpv6", PB().eth().ipv6("fd00::1", "fd00::2").icmp().build(), skip(NP_CNT_OTHER_L4)});
  r.push_back({"bogus_ihl_4", PB().eth().ipv4("10.1.0.1", "10.1.0.2").tcp(1, 2).payload(40).ihl(4).build(),
               skip(NP_CNT_UNPARSED)});
  r.push_back({"bogus_ihl_0", PB().eth().ipv4("10.1.0.1", "10.1.0.2").udp(1, 2).ihl(0).build(),
               skip(NP_CNT_UNPARSED)});
  r.push_back({"ihl_15_longer_than_packet", PB().eth().ipv4("10.1.0.1", "10.1.0.2").tcp(1, 2).ihl(15).build(),
               skip(NP_CNT_TRUNCATED)});
  r.push_back(
      {"ihl_beyond_ip_length",
       PB().eth().ipv4("10.1.0.1", "10.1.0.2").tcp(1, 2).payload(100).ihl(15).ip_total_length(40).build(),
       skip(NP_CNT_UNPARSED)});
  r.push_back({"bogus_tcp_data_offset",
               PB().eth().ipv4("10.1.0.1", "10.1.0.2").tcp(1, 2).payload(10).tcp_data_offset(2).build(),
               skip(NP_CNT_UNPARSED)});
  r.push_back({"ip_length_beyond_frame",
               PB().eth().ipv4("10.1.0.1", "10.1.0.2").tcp(1, 2).payload(10).ip_total_length(1500).build(),
               skip(NP_CNT_TRUNCATED)});
  r.push_back({"ip_length_below_headers",
               PB().eth().ipv4("10.1.0.1", "10.1.0.2").tcp(1, 2).payload(10).ip_total_length(30).build(),
               skip(NP_CNT_UNPARSED)});
  r.push_back(
      {"not_ipv4_version", PB().eth().ipv4("10.1.0.1", "10.1.0.2").tcp(1, 2).build(), skip(NP_CNT_UNPARSED)});
  r.back().pkt[14] = 0x55;  // version 5 behind an IPv4 ethertype
  r.push_back({"triple_vlan",
               PB().eth().vlan(1).vlan(2).vlan(3).ipv4("10.1.0.1", "10.1.0.2").tcp(1, 2).build(),
               skip(NP_CNT_UNPARSED)});
  r.push_back({"ipv4_first_fragment",
               PB().eth().ipv4("10.1.0.1", "10.1.0.2").udp(1, 2).payload(100).ipv4_frag(0, true).build(),
               skip(NP_CNT_IP_FRAGMENT)});
  r.push_back({"ipv4_later_fragment",
               PB().eth().ipv4("10.1.0.1", "10.1.0.2").payload(100).ipv4_frag(185, false).build(),
               skip(NP_CNT_IP_FRAGMENT)});
  r.push_back({"ipv6_fragment",
               PB().eth().ipv6("fd00::1", "fd00::2").ipv6_frag(0, true).udp(3, 4).payload(5).build(),
               skip(NP_CNT_IP_FRAGMENT)});
  r.push_back({"ipv6_too_many_ext",
               PB().eth()
                   .ipv6("fd00::1", "fd00::2")
                   .ipv6_ext(0)
                   .ipv6_ext(60)
                   .ipv6_ext(43)
                   .ipv6_ext(60)
                   .ipv6_ext(60)
                   .udp(1, 2)
                   .build(),
               skip(NP_CNT_IPV6_EXT)});
  r.push_back({"ipv6_esp", PB().eth().ipv6("fd00::1", "fd00::2").payload(40).build(), skip(NP_CNT_OTHER_L4)});
  r.back().pkt[14 + 6] = 50;  // next header ESP
  return r;
}

// Full packets, each cut at every header boundary and one byte into every header: always TRUNCATED.
std::vector<Row> truncated_rows() {
  std::vector<std::pair<std::string, PB>> full = {
      {"ipv4_tcp", PB().eth().ipv4("10.1.0.1", "10.1.0.2", 1).tcp(1, 2, 0x18, 1).payload(50)},
      {"qinq_ipv6_ext_udp",
       PB().eth().vlan(1, 0x88a8).vlan(2).ipv6("fd00::1", "fd00::2").ipv6_ext(0).udp(1, 2).payload(20)},
      {"vlan_ipv4_roce",
       PB().eth().vlan(3).ipv4("10.3.0.1", "10.3.0.2").udp(1, kRoce).bth(0x04, 5, 6).payload(30)},
      {"ipv6_roce", PB().eth().ipv6("fd00::1", "fd00::2").udp(1, kRoce).bth(0x0a, 5, 6).payload(8)},
  };
  std::vector<Row> out;
  for (auto& [name, b] : full) {
    auto pkt = b.build();
    for (const auto& [hdr, off] : b.marks()) {
      for (std::size_t cut : {off, off + 1}) {
        if (cut < 14 || cut >= pkt.size()) continue;  // BPF_PROG_TEST_RUN needs an Ethernet header
        if (hdr == "payload" && cut != off) continue;
        out.push_back({name + "_cut_at_" + hdr + "_" + std::to_string(cut),
                       std::vector<uint8_t>(pkt.begin(), pkt.begin() + static_cast<long>(cut)),
                       skip(NP_CNT_TRUNCATED)});
      }
    }
  }
  return out;
}

using agent::ProbeVariant;

// One probe per variant per process (loading takes ~0.3-1.5 s here): CTest runs each variant's rows in one
// process (tests/bpf/CMakeLists.txt).
std::map<ProbeVariant, std::unique_ptr<Probe>> g_probes;

class ProbeTable : public ::testing::TestWithParam<std::tuple<Row, Entry, ProbeVariant>> {
 protected:
  void SetUp() override {
    NP_REQUIRE_ROOT();
    const ProbeVariant v = std::get<2>(GetParam());
    auto& slot = g_probes[v];
    if (!slot) {
      std::string err;
      ProbeOptions o;
      o.gap_ns = 1'000'000'000;  // no gap cut inside one row
      o.max_flows = 256;         // one flow per row: a small table loads faster
      o.variant = v;
      slot = Probe::open(o, err);
      ASSERT_TRUE(slot) << err;
      ASSERT_EQ(slot->variant(), v);
    }
    probe_ = slot.get();
    clear_flows(*probe_);
    probe_->poll([](const np_flowlet&) {});
  }
  Probe* probe_ = nullptr;
};

Addr16 addr(const std::string& s) {
  auto a = parse_addr(s);
  EXPECT_TRUE(a) << s;
  return a.value_or(Addr16{});
}

TEST_P(ProbeTable, PacketGivesExpectedFlowOrCounter) {
  const auto& [row, entry, variant] = GetParam();
  const auto& w = row.want;
  int fd = probe_->program_fd(entry_prog(entry));
  ASSERT_GE(fd, 0);
  auto before = probe_->counters();
  auto r = run_prog(fd, entry_is_tc(entry), row.pkt);
  ASSERT_EQ(r.err, 0) << "BPF_PROG_TEST_RUN failed";
  EXPECT_EQ(r.retval, entry_is_tc(entry) ? 0u /* TC_ACT_OK */ : 2u /* XDP_PASS */);
  auto after = probe_->counters();
  EXPECT_EQ(after[NP_CNT_PACKETS] - before[NP_CNT_PACKETS], 1u);
  auto flows = dump_flows(*probe_);
  for (uint32_t c = NP_CNT_NON_IP; c < NP_CNT_MAX; ++c) {
    if (c == NP_CNT_BURSTS_EMITTED) continue;
    uint64_t want = (c == w.reason) ? 1 : 0;
    EXPECT_EQ(after[c] - before[c], want) << "counter " << c;
  }
  if (w.reason != Expect::NP_PARSE_OK_) {
    EXPECT_TRUE(flows.empty());
    return;
  }
  ASSERT_EQ(flows.size(), 1u);
  const auto& [k, st] = flows[0];
  EXPECT_NE(st.key_tag, 0u) << "the state carries its key's tag";
  EXPECT_EQ(k.family, w.family);
  EXPECT_EQ(Addr16(std::to_array(k.saddr)), addr(w.src));
  EXPECT_EQ(Addr16(std::to_array(k.daddr)), addr(w.dst));
  EXPECT_EQ(format_addr(k.saddr), w.src) << "IPv4 is stored v4-mapped and printed plain";
  EXPECT_EQ(k.sport, w.sport);
  EXPECT_EQ(k.dport, w.dport);
  EXPECT_EQ(k.proto, w.proto);
  EXPECT_EQ(k.qpn, w.qpn);
  EXPECT_EQ(k.dir, entry_dir(entry));
  EXPECT_NE(k.ifindex, 0u);
  EXPECT_EQ(k.pad0, 0);
  EXPECT_EQ(st.dead, 0u);
  EXPECT_EQ(st.b.packets, 1u);
  EXPECT_EQ(st.b.bytes, w.ip_bytes);
  EXPECT_EQ(st.b.payload_bytes, w.payload);
  EXPECT_EQ(st.b.tcp_flags, w.tcp_flags);
  EXPECT_EQ(st.b.last_psn, w.psn);
  EXPECT_EQ(st.b.first_ns, st.b.last_ns);
  for (int c = 0; c < NP_ROCE_CLASSES; ++c)
    EXPECT_EQ(st.b.roce_ops[c], c == w.roce_class ? 1u : 0u) << "class " << c;
}

std::string row_name(const ::testing::TestParamInfo<std::tuple<Row, Entry, ProbeVariant>>& info) {
  const char* e[] = {"tc_ingress", "tc_egress", "xdp"};
  return std::get<0>(info.param).name + "_" + e[static_cast<int>(std::get<1>(info.param))] + "_" +
         agent::variant_name(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Packets, ProbeTable,
                         ::testing::Combine(::testing::ValuesIn(rows()),
                                            ::testing::Values(Entry::kTcIngress, Entry::kTcEgress,
                                                              Entry::kXdp),
                                            ::testing::ValuesIn(kVariants)),
                         row_name);
// The kernel's skb test harness itself rejects an untagged IP ethertype followed by less than an IP header
// (bpf_prog_test_run_skb reads it to fill in the socket), so those few rows run through XDP only.
std::vector<Row> truncated_rows_for_tc() {
  std::vector<Row> out;
  for (auto& r : truncated_rows()) {
    uint16_t ethertype = static_cast<uint16_t>(r.pkt[12] << 8 | r.pkt[13]);
    bool refused =
        (ethertype == 0x0800 && r.pkt.size() < 14 + 20) || (ethertype == 0x86DD && r.pkt.size() < 14 + 40);
    if (!refused) out.push_back(std::move(r));
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Truncated, ProbeTable,
                         ::testing::Combine(::testing::ValuesIn(truncated_rows_for_tc()),
                                            ::testing::Values(Entry::kTcIngress, Entry::kTcEgress),
                                            ::testing::ValuesIn(kVariants)),
                         row_name);
INSTANTIATE_TEST_SUITE_P(TruncatedXdp, ProbeTable,
                         ::testing::Combine(::testing::ValuesIn(truncated_rows()),
                                            ::testing::Values(Entry::kXdp), ::testing::ValuesIn(kVariants)),
                         row_name);

}  // namespace
}  // namespace netprism::test
