// Switch telemetry decoders (aggregator/flowin): IPFIX, NetFlow v9 and sFlow v5 datagrams built byte by byte
// after the RFCs, decoded into flowlets; hostile input (every truncation, random corruption, template floods)
// gets an error or is skipped, never a crash; captures read through libpcap.
#include <gtest/gtest.h>
#include <pcap/pcap.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "flowin.hpp"
#include "listener.hpp"
#include "netprism/addr.hpp"

using namespace netprism;
using namespace netprism::flowin;

namespace {

struct Bytes {
  std::vector<uint8_t> b;
  Bytes& u(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& x) {
    b.insert(b.end(), x.begin(), x.end());
    return *this;
  }
  Bytes& ip4(const char* a) {
    auto p = *parse_addr(a);
    return raw({p[12], p[13], p[14], p[15]});
  }
  void set16(size_t at, uint64_t v) {
    b[at] = static_cast<uint8_t>(v >> 8);
    b[at + 1] = static_cast<uint8_t>(v);
  }
};

// IPFIX: template 256 (src, dst, sport, dport, proto, flags, octets (reduced to 4 bytes), packets, start ms,
// end ms), then one data record. export time 1,700,000,000 s.
constexpr uint64_t kStartMs = 1700000000123, kEndMs = 1700000000456;
Bytes ipfix_template(uint16_t tid = 256) {
  Bytes t;
  t.u(2, 2).u(4 + 4 + 10 * 4, 2).u(tid, 2).u(10, 2);
  for (auto [id, len] : std::vector<std::pair<int, int>>{
           {8, 4}, {12, 4}, {7, 2}, {11, 2}, {4, 1}, {6, 1}, {1, 4}, {2, 8}, {152, 8}, {153, 8}})
    t.u(id, 2).u(len, 2);
  return t;
}
Bytes ipfix_data(uint64_t octets, uint64_t packets, uint8_t proto = 6, uint16_t dport = 5001) {
  Bytes d;
  d.u(256, 2).u(0, 2).ip4("10.1.0.1").ip4("10.1.0.2").u(40000, 2).u(dport, 2).u(proto, 1).u(0x1b, 1);
  d.u(octets, 4).u(packets, 8).u(kStartMs, 8).u(kEndMs, 8);
  d.set16(2, d.b.size());
  return d;
}
std::vector<uint8_t> ipfix_msg(std::vector<Bytes> sets, uint32_t domain = 0) {
  Bytes m;
  m.u(10, 2).u(0, 2).u(1700000000, 4).u(7, 4).u(domain, 4);
  for (auto& s : sets) m.raw(s.b);
  m.set16(2, m.b.size());
  return m.b;
}

bool run(Decoder& d, const std::vector<uint8_t>& dg, std::vector<Flowlet>& out, std::string* node = nullptr,
         std::string* err = nullptr, uint16_t port = 4739) {
  std::string n, e;
  bool ok = d.decode("192.0.2.9", port, 42, dg, out, n, e);
  if (node) *node = n;
  if (err) *err = e;
  return ok;
}

TEST(Ipfix, TemplateThenDataBecomesAFlowlet) {
  auto d = make_decoder(Protocol::kIpfix);
  std::vector<Flowlet> out;
  std::string node;
  ASSERT_TRUE(run(*d, ipfix_msg({ipfix_template(), ipfix_data(1000040, 1000)}), out, &node));
  EXPECT_EQ(node, "ipfix:192.0.2.9");
  ASSERT_EQ(out.size(), 1u);
  const Flowlet& f = out[0];
  EXPECT_EQ(format_addr(f.key.saddr), "10.1.0.1");
  EXPECT_EQ(format_addr(f.key.daddr), "10.1.0.2");
  EXPECT_EQ(f.key.family, 4);
  EXPECT_EQ(f.key.sport, 40000);
  EXPECT_EQ(f.key.dport, 5001);
  EXPECT_EQ(f.key.proto, NP_PROTO_TCP);
  EXPECT_EQ(f.key.dir, NP_DIR_EGRESS);
  EXPECT_EQ(f.bytes, 1000040u);
  EXPECT_EQ(f.packets, 1000u);
  EXPECT_EQ(f.payload_bytes, 1000040u - 1000u * 40);  // minimal IPv4 + TCP headers per packet
  EXPECT_EQ(f.tcp_flags, 0x1b);
  EXPECT_EQ(f.first_ns, kStartMs * 1000000);
  EXPECT_EQ(f.last_ns, kEndMs * 1000000);
}

TEST(Ipfix, PureAcksCarryNoPayloadAndOtherProtocolsAreSkipped) {
  auto d = make_decoder(Protocol::kIpfix);
  std::vector<Flowlet> out;
  ASSERT_TRUE(run(*d, ipfix_msg({ipfix_template(), ipfix_data(52 * 100, 100), ipfix_data(800, 10, 1)}), out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].payload_bytes, 0u);
  EXPECT_EQ(d->stats().skipped_records, 1u);  // ICMP
}

TEST(Ipfix, RoceIsUdpTo4791) {
  auto d = make_decoder(Protocol::kIpfix);
  std::vector<Flowlet> out;
  ASSERT_TRUE(run(*d, ipfix_msg({ipfix_template(), ipfix_data(4096 * 10, 10, 17, 4791)}), out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key.proto, NP_PROTO_ROCE);
}

TEST(Ipfix, DataBeforeTemplateIsCountedThenDecodedOnceTheTemplateCame) {
  auto d = make_decoder(Protocol::kIpfix);
  std::vector<Flowlet> out;
  ASSERT_TRUE(run(*d, ipfix_msg({ipfix_data(5000, 5)}), out));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(d->stats().no_template, 1u);
  ASSERT_TRUE(run(*d, ipfix_msg({ipfix_template()}), out));
  ASSERT_TRUE(run(*d, ipfix_msg({ipfix_data(5000, 5)}), out));
  EXPECT_EQ(out.size(), 1u);
  // Templates are per observation domain: another domain of the same exporter has none.
  ASSERT_TRUE(run(*d, ipfix_msg({ipfix_data(5000, 5)}, 2), out));
  EXPECT_EQ(out.size(), 1u);
  // Withdrawal (field count 0) forgets it.
  Bytes w;
  w.u(2, 2).u(8, 2).u(256, 2).u(0, 2);
  ASSERT_TRUE(run(*d, ipfix_msg({w, ipfix_data(5000, 5)}), out));
  EXPECT_EQ(out.size(), 1u);
}

TEST(Ipfix, TwoExportersOnOneHostKeepTheirOwnTemplates) {
  // Both send template 256 (as softflowd and pmacct's nfprobe do), with different layouts, from two ports.
  auto d = make_decoder(Protocol::kIpfix);
  Bytes other, rec;
  other.u(2, 2).u(4 + 4 + 6 * 4, 2).u(256, 2).u(6, 2);
  for (auto [id, len] : std::vector<std::pair<int, int>>{{12, 4}, {8, 4}, {11, 2}, {7, 2}, {4, 1}, {1, 4}})
    other.u(id, 2).u(len, 2);
  rec.u(256, 2).u(0, 2).ip4("10.9.0.2").ip4("10.9.0.1").u(80, 2).u(33000, 2).u(17, 1).u(777, 4);
  rec.set16(2, rec.b.size());
  std::vector<Flowlet> out;
  std::string node;
  ASSERT_TRUE(run(*d, ipfix_msg({ipfix_template()}), out, nullptr, nullptr, 1111));
  ASSERT_TRUE(run(*d, ipfix_msg({other}, 3), out, nullptr, nullptr, 2222));
  ASSERT_TRUE(run(*d, ipfix_msg({ipfix_data(5000, 5)}), out, &node, nullptr, 1111));
  EXPECT_EQ(node, "ipfix:192.0.2.9");
  ASSERT_TRUE(run(*d, ipfix_msg({rec}, 3), out, &node, nullptr, 2222));
  EXPECT_EQ(node, "ipfix:192.0.2.9/3");  // a non-zero observation domain names the exporter apart
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(format_addr(out[0].key.saddr), "10.1.0.1");
  EXPECT_EQ(out[0].bytes, 5000u);
  EXPECT_EQ(format_addr(out[1].key.saddr), "10.9.0.1");
  EXPECT_EQ(out[1].key.sport, 33000);
  EXPECT_EQ(out[1].bytes, 777u);
}

TEST(Ipfix, SamplingFromAnOptionsRecordScalesCounts) {
  auto d = make_decoder(Protocol::kIpfix);
  // Options template 300: scope observationDomainId (149), samplingInterval (34).
  Bytes ot, od;
  ot.u(3, 2).u(4 + 6 + 8, 2).u(300, 2).u(2, 2).u(1, 2).u(149, 2).u(4, 2).u(34, 2).u(4, 2);
  od.u(300, 2).u(4 + 8, 2).u(1, 4).u(100, 4);
  std::vector<Flowlet> out;
  ASSERT_TRUE(run(*d, ipfix_msg({ot, od, ipfix_template(), ipfix_data(150000, 100)}), out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bytes, 15000000u);
  EXPECT_EQ(out[0].packets, 10000u);
}

TEST(Ipfix, VariableLengthFieldsAreSkippedOver) {
  auto d = make_decoder(Protocol::kIpfix);
  Bytes t, r;
  // interfaceName (82) of variable length, then the addresses, ports, proto, octets, packets.
  t.u(2, 2).u(4 + 4 + 8 * 4, 2).u(257, 2).u(8, 2);
  for (auto [id, len] : std::vector<std::pair<int, int>>{
           {82, 65535}, {8, 4}, {12, 4}, {7, 2}, {11, 2}, {4, 1}, {1, 8}, {2, 8}})
    t.u(id, 2).u(len, 2);
  r.u(257, 2).u(0, 2).u(3, 1).raw({'e', 't', 'h'}).ip4("10.1.0.3").ip4("10.1.0.4").u(1, 2).u(2, 2).u(17, 1);
  r.u(9000, 8).u(3, 8);
  r.set16(2, r.b.size());
  std::vector<Flowlet> out;
  ASSERT_TRUE(run(*d, ipfix_msg({t, r}), out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(format_addr(out[0].key.daddr), "10.1.0.4");
  EXPECT_EQ(out[0].bytes, 9000u);
  EXPECT_EQ(out[0].first_ns, 42u);  // no times in the record: the datagram's arrival
}

TEST(NetflowV9, UptimeRelativeTimesBecomeAbsolute) {
  auto d = make_decoder(Protocol::kIpfix);
  Bytes m;
  const uint64_t uptime = 5000000, unix_s = 1700000000;
  m.u(9, 2).u(2, 2).u(uptime, 4).u(unix_s, 4).u(1, 4).u(0, 4);
  m.u(0, 2).u(4 + 4 + 9 * 4, 2).u(260, 2).u(9, 2);  // template flowset
  for (auto [id, len] : std::vector<std::pair<int, int>>{
           {8, 4}, {12, 4}, {7, 2}, {11, 2}, {4, 1}, {1, 4}, {2, 4}, {22, 4}, {21, 4}})
    m.u(id, 2).u(len, 2);
  size_t at = m.b.size();
  m.u(260, 2).u(0, 2).ip4("10.2.0.1").ip4("10.2.0.2").u(5, 2).u(6, 2).u(6, 1);
  m.u(200000, 4).u(100, 4).u(uptime - 3000, 4).u(uptime - 1000, 4).u(0, 3);  // 3 bytes of padding
  m.set16(at + 2, m.b.size() - at);
  std::vector<Flowlet> out;
  ASSERT_TRUE(run(*d, m.b, out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first_ns, (unix_s * 1000 - 3000) * 1000000);
  EXPECT_EQ(out[0].last_ns, (unix_s * 1000 - 1000) * 1000000);
}

TEST(NetflowV9, SamplingFromAnOptionsTemplateScalesCounts) {
  // Options template 257 (v9 flowset 1): scope system (1) of 4 bytes; SAMPLING_INTERVAL (34) of 4 bytes --
  // what pmacct's nfprobe and routers send with sampling on.
  auto d = make_decoder(Protocol::kIpfix);
  Bytes m;
  m.u(9, 2).u(4, 2).u(1000, 4).u(1700000000, 4).u(1, 4).u(0, 4);
  m.u(1, 2).u(4 + 6 + 8 + 2, 2).u(257, 2).u(4, 2).u(4, 2).u(1, 2).u(4, 2).u(34, 2).u(4, 2).u(0, 2);
  m.u(257, 2).u(4 + 8, 2).u(0, 4).u(64, 4);
  m.u(0, 2).u(4 + 4 + 6 * 4, 2).u(258, 2).u(6, 2);
  for (auto [id, len] : std::vector<std::pair<int, int>>{{8, 4}, {12, 4}, {7, 2}, {11, 2}, {4, 1}, {1, 4}})
    m.u(id, 2).u(len, 2);
  size_t at = m.b.size();
  m.u(258, 2).u(0, 2).ip4("10.4.0.1").ip4("10.4.0.2").u(1, 2).u(2, 2).u(17, 1).u(1500, 4).u(0, 3);
  m.set16(at + 2, m.b.size() - at);
  std::vector<Flowlet> out;
  std::string err;
  ASSERT_TRUE(run(*d, m.b, out, nullptr, &err)) << err;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bytes, 1500u * 64);
}

// sFlow v5: `samples` copies of one expanded flow sample (1:N) with a raw Ethernet header record.
std::vector<uint8_t> sflow_dg(const std::vector<uint8_t>& frame, uint32_t frame_len, uint32_t rate,
                              uint32_t samples = 1) {
  Bytes rec, smp, dg;
  rec.u(1, 4).u(frame_len + 4, 4).u(4, 4).u(frame.size(), 4).raw(frame);
  while (rec.b.size() % 4) rec.u(0, 1);
  smp.u(1, 4).u(0, 4).u(3, 4).u(rate, 4).u(rate * 10, 4).u(0, 4).u(0, 4).u(7, 4).u(0, 4).u(8, 4).u(1, 4);
  smp.u(1, 4).u(rec.b.size(), 4).raw(rec.b);
  dg.u(5, 4).u(1, 4).ip4("192.0.2.77").u(0, 4).u(1, 4).u(1000, 4).u(samples, 4);
  for (uint32_t i = 0; i < samples; ++i) dg.u(3, 4).u(smp.b.size(), 4).raw(smp.b);
  return dg.b;
}
std::vector<uint8_t> roce_frame(uint32_t qpn, uint8_t opcode, uint16_t ip_len) {
  Bytes f;
  f.raw(std::vector<uint8_t>(12, 0xaa)).u(0x0800, 2);
  f.u(0x45, 1).u(0, 1).u(ip_len, 2).u(0, 4).u(64, 1).u(17, 1).u(0, 2).ip4("10.3.0.1").ip4("10.3.0.2");
  f.u(49152, 2).u(4791, 2).u(ip_len - 20, 2).u(0, 2);
  f.u(opcode, 1).u(0, 1).u(0xffff, 2).u(0, 1).u(qpn, 3).u(0, 1).u(77, 3);
  f.raw(std::vector<uint8_t>(16, 0));  // some payload
  return f.b;
}

TEST(Sflow, RoceSampleGivesQpnOpcodeClassAndScaledCounts) {
  auto d = make_decoder(Protocol::kSflow);
  std::vector<Flowlet> out;
  std::string node;
  ASSERT_TRUE(run(*d, sflow_dg(roce_frame(0x123456, 0x0a, 1052), 1066 + 4, 1000), out, &node));
  EXPECT_EQ(node, "sflow:192.0.2.77");  // the agent address inside the datagram
  ASSERT_EQ(out.size(), 1u);
  const Flowlet& f = out[0];
  EXPECT_EQ(f.key.proto, NP_PROTO_ROCE);
  EXPECT_EQ(f.key.qpn, 0x123456u);
  EXPECT_EQ(f.key.ifindex, 7u);
  EXPECT_EQ(f.roce_ops[NP_ROCE_WRITE], 1000u);
  EXPECT_EQ(f.packets, 1000u);
  EXPECT_EQ(f.bytes, 1052u * 1000);
  EXPECT_EQ(f.payload_bytes, (1052u - 28) * 1000);
  EXPECT_EQ(f.first_ns, 42u);
  EXPECT_EQ(f.end_reason, NP_END_SAMPLE);
}

// Each sample stays a flowlet of its own, so its packets field is the sampling rate N the analysis needs
// (what share of teardowns a 1:N source can show): two samples of one flow in a datagram are two flowlets.
TEST(Sflow, EverySampleIsItsOwnFlowletCarryingItsRate) {
  auto d = make_decoder(Protocol::kSflow);
  std::vector<Flowlet> out;
  ASSERT_TRUE(run(*d, sflow_dg(roce_frame(0x42, 0x0a, 1052), 1066 + 4, 5, 2), out));
  ASSERT_EQ(out.size(), 2u);
  for (const Flowlet& f : out) {
    EXPECT_EQ(f.end_reason, NP_END_SAMPLE);
    EXPECT_EQ(f.packets, 5u);
    EXPECT_EQ(f.bytes, 1052u * 5);
  }
}

// A sample lies between its agent's previous flush and its datagram's arrival, at most one flush tick (1 s)
// before it; datagrams sent back to back are one flush.
TEST(Sflow, SampleSpansItsAgentsFlushInterval) {
  using W = std::pair<uint64_t, uint64_t>;
  auto d = make_decoder(Protocol::kSflow);
  const auto dg = sflow_dg(roce_frame(0x42, 0x0a, 1052), 1066 + 4, 5);
  auto window = [&](uint64_t at) {
    std::vector<Flowlet> out;
    std::string node, err;
    EXPECT_TRUE(d->decode("192.0.2.9", 6343, at, dg, out, node, err)) << err;
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? W{} : W{out[0].first_ns, out[0].last_ns};
  };
  constexpr uint64_t s = 1'000'000'000, us = 1'000;
  EXPECT_EQ(window(100 * s), (W{100 * s, 100 * s}));                                // first heard: no window
  EXPECT_EQ(window(100 * s + 700'000 * us), (W{100 * s, 100 * s + 700'000 * us}));  // since last flush
  EXPECT_EQ(window(100 * s + 700'300 * us), (W{100 * s, 100 * s + 700'300 * us}));  // same flush
  EXPECT_EQ(window(109 * s), (W{108 * s, 109 * s}));  // never more than 1 s back
  // A busy agent streaming datagrams 0.5 ms apart starts a new flush every 10 ms: short windows once its
  // first flush (which may hold samples from up to 1 s before, after a quiet) is over.
  uint64_t t = 200 * s, widest = 0;
  for (int i = 0; i < 100; ++i, t += 500 * us) {
    auto [from, to] = window(t);
    if (i >= 30) widest = std::max(widest, to - from);
  }
  EXPECT_LE(widest, 10'500 * us);
}

TEST(Sflow, CounterSamplesAndNonIpAreSkipped) {
  auto d = make_decoder(Protocol::kSflow);
  auto arp = roce_frame(1, 0, 100);
  arp[12] = 0x08, arp[13] = 0x06;
  std::vector<Flowlet> out;
  ASSERT_TRUE(run(*d, sflow_dg(arp, 64, 10), out));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(d->stats().skipped_records, 1u);
}

// Hostile input: every prefix and random corruptions of valid datagrams either decode or fail with a reason.
void fuzz(Protocol p, const std::vector<uint8_t>& valid) {
  auto d = make_decoder(p);
  std::vector<Flowlet> out;
  for (size_t n = 0; n < valid.size(); ++n) {
    std::string err;
    bool ok = run(*d, std::vector<uint8_t>(valid.begin(), valid.begin() + static_cast<long>(n)), out, nullptr,
                  &err);
    EXPECT_TRUE(ok || !err.empty()) << n;
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 20000; ++i) {
    auto m = valid;
    for (int k = 0; k < 1 + i % 4; ++k) m[rng() % m.size()] = static_cast<uint8_t>(rng());
    std::string err;
    bool ok = run(*d, m, out, nullptr, &err);
    EXPECT_TRUE(ok || !err.empty());
    if (out.size() > 100000) out.clear();
  }
}

TEST(Hostile, IpfixTruncatedOrCorruptedNeverCrashes) {
  fuzz(Protocol::kIpfix, ipfix_msg({ipfix_template(), ipfix_data(1000040, 1000)}));
}

TEST(Hostile, SflowTruncatedOrCorruptedNeverCrashes) {
  fuzz(Protocol::kSflow, sflow_dg(roce_frame(5, 4, 1052), 1070, 100));
}

TEST(Hostile, ClearErrors) {
  auto d = make_decoder(Protocol::kIpfix);
  std::vector<Flowlet> out;
  std::string err;
  EXPECT_FALSE(run(*d, {0, 5, 0, 0}, out, nullptr, &err));
  EXPECT_NE(err.find("version 5"), std::string::npos) << err;
  auto m = ipfix_msg({ipfix_template()});
  m[3] += 40;  // message length past the datagram
  EXPECT_FALSE(run(*d, m, out, nullptr, &err));
  EXPECT_NE(err.find("message length"), std::string::npos) << err;
  auto s = make_decoder(Protocol::kSflow);
  Bytes huge;
  huge.u(5, 4).u(1, 4).ip4("1.2.3.4").u(0, 4).u(0, 4).u(0, 4).u(1u << 30, 4);
  EXPECT_FALSE(run(*s, huge.b, out, nullptr, &err));
  EXPECT_NE(err.find("samples cannot fit"), std::string::npos) << err;
}

TEST(Hostile, TemplateFloodStaysBounded) {
  // 5,000 exporters x 100 templates x 100 fields = 50 M fields offered; the cache keeps at most 1 Mi and
  // still decodes a fresh exporter's data.
  auto d = make_decoder(Protocol::kIpfix);
  std::vector<Flowlet> out;
  for (uint32_t dom = 0; dom < 5000; ++dom) {
    Bytes t;
    t.u(2, 2).u(0, 2);
    for (uint16_t tid = 256; tid < 356; ++tid) {
      t.u(tid, 2).u(100, 2);
      for (int k = 0; k < 100; ++k) t.u(1, 2).u(1, 2);
    }
    t.set16(2, t.b.size());
    ASSERT_TRUE(run(*d, ipfix_msg({t}, dom + 10), out));
  }
  ASSERT_TRUE(run(*d, ipfix_msg({ipfix_template(), ipfix_data(5000, 5)}, 1), out));
  EXPECT_EQ(out.size(), 1u);
}

TEST(Capture, ReadsUdpDatagramsFromAPcap) {
  auto path = std::filesystem::temp_directory_path() / ("flowin_test_" + std::to_string(getpid()) + ".pcap");
  {
    pcap_t* dead = pcap_open_dead(DLT_EN10MB, 65535);
    pcap_dumper_t* dump = pcap_dump_open(dead, path.c_str());
    ASSERT_NE(dump, nullptr);
    auto payload = ipfix_msg({ipfix_template(), ipfix_data(1000040, 1000)});
    Bytes f;
    f.raw(std::vector<uint8_t>(12, 0)).u(0x0800, 2);
    f.u(0x45, 1).u(0, 1).u(28 + payload.size(), 2).u(0, 4).u(64, 1).u(17, 1).u(0, 2);
    f.ip4("198.51.100.7").ip4("198.51.100.1").u(33333, 2).u(4739, 2).u(8 + payload.size(), 2).u(0, 2);
    f.raw(payload);
    pcap_pkthdr h{};
    h.ts.tv_sec = 1700000001;
    h.caplen = h.len = static_cast<bpf_u_int32>(f.b.size());
    pcap_dump(reinterpret_cast<u_char*>(dump), &h, f.b.data());
    pcap_dump_close(dump);
    pcap_close(dead);
  }
  Stats st;
  std::string err;
  auto r = read_capture(path, Protocol::kIpfix, st, err);
  ASSERT_TRUE(r) << err;
  ASSERT_EQ(r->count("ipfix:198.51.100.7"), 1u);
  EXPECT_EQ(r->at("ipfix:198.51.100.7").size(), 1u);
  // The same capture read as sFlow: not one sFlow datagram in it, a clear error.
  EXPECT_FALSE(read_capture(path, Protocol::kSflow, st, err));
  EXPECT_NE(err.find("none of them sflow"), std::string::npos) << err;
  std::filesystem::remove(path);
  EXPECT_FALSE(read_capture("/nonexistent.pcap", Protocol::kIpfix, st, err));
}

TEST(Listen, Urls) {
  std::string err;
  auto a = parse_listen("ipfix://0.0.0.0:4739", err);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->proto, Protocol::kIpfix);
  EXPECT_EQ(a->port, 4739);
  auto b = parse_listen("sflow://[::1]:6343", err);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->host, "::1");
  EXPECT_FALSE(parse_listen("sflow://host.example:6343", err));
  EXPECT_FALSE(parse_listen("jflow://0.0.0.0:1", err));
  EXPECT_FALSE(parse_listen("ipfix://0.0.0.0:99999", err));
  EXPECT_FALSE(parse_listen("ipfix://0.0.0.0", err));
  EXPECT_EQ(local_endpoint("tcp://0.0.0.0:7470"), "tcp://127.0.0.1:7470");
  EXPECT_EQ(local_endpoint("tcp://*:7470"), "tcp://127.0.0.1:7470");
  EXPECT_EQ(local_endpoint("ipc:///run/x"), "ipc:///run/x");
}

}  // namespace
