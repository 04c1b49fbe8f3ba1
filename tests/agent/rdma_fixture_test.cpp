// RDMA without hardware: a fixture sysfs tree laid out like /sys/class/infiniband, and netlink messages built
// byte by byte from <rdma/rdma_netlink.h> as the kernel's nldev code emits them.
#include <arpa/inet.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <rdma/rdma_netlink.h>

#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "agent/nl_builder.hpp"
#include "agent/test_util.hpp"
#include "batcher.hpp"
#include "clock.hpp"
#include "rdma/netlink.hpp"
#include "rdma/rdma.hpp"
#include "rdma/sysfs.hpp"

using namespace netprism;
using namespace netprism::agent;
using netprism::test::NlBuilder;
using netprism::test::qp_message;
using netprism::test::sockaddr_attr;
using netprism::test::TempDir;

namespace {

void write_counter(const std::string& dir, const std::string& name, uint64_t v) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + name) << v << "\n";
}

struct PortFixture {
  explicit PortFixture(const TempDir& root, const std::string& dev = "mlx5_0", int port = 1)
      : dir(root.path() + "/" + dev + "/ports/" + std::to_string(port)) {
    set(0, 0, 0, 0);
  }
  void set(uint64_t xw, uint64_t rw, uint64_t xp, uint64_t rp) {
    write_counter(dir + "/counters", "port_xmit_data", xw);
    write_counter(dir + "/counters", "port_rcv_data", rw);
    write_counter(dir + "/counters", "port_xmit_packets", xp);
    write_counter(dir + "/counters", "port_rcv_packets", rp);
  }
  std::string dir;
};

}  // namespace

TEST(RdmaSysfs, FixtureCountersAreWordsTimesFour) {
  TempDir root;
  PortFixture p(root);
  p.set(1000, 250, 7, 3);
  write_counter(p.dir + "/hw_counters", "out_of_sequence", 5);
  write_counter(p.dir + "/hw_counters", "lifespan", 10);  // a setting, not a counter
  PortFixture other(root, "mlx5_1", 2);
  auto ports = list_rdma_ports(root.path());
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(ports[0].device, "mlx5_0");
  EXPECT_EQ(ports[0].port, 1u);
  EXPECT_EQ(ports[1].device, "mlx5_1");
  EXPECT_EQ(ports[1].port, 2u);
  RawPortCounters c;
  std::string err;
  ASSERT_TRUE(read_port_counters(ports[0], c, err)) << err;
  RdmaCounterSample s = to_sample(ports[0], 123, c);
  EXPECT_EQ(s.xmit_bytes, 4000u);
  EXPECT_EQ(s.rcv_bytes, 1000u);
  EXPECT_EQ(s.xmit_packets, 7u);
  EXPECT_EQ(s.rcv_packets, 3u);
  EXPECT_EQ(s.hw, (std::map<std::string, uint64_t>{{"out_of_sequence", 5}}));
  ASSERT_TRUE(read_port_counters(ports[0], c, err, false)) << err;  // between shipped samples
  EXPECT_TRUE(c.hw.empty());
  EXPECT_EQ(c.xmit_words, 1000u);
}

TEST(RdmaSysfs, SoftRoceHasOnlyHwCounters) {
  // rxe: no counters/ group, packets in hw_counters (sent_pkts/rcvd_pkts), bytes nowhere.
  TempDir root;
  const std::string dir = root.path() + "/rxe0/ports/1";
  write_counter(dir + "/hw_counters", "sent_pkts", 2826);
  write_counter(dir + "/hw_counters", "rcvd_pkts", 2825);
  RawPortCounters c;
  std::string err;
  ASSERT_TRUE(read_port_counters(list_rdma_ports(root.path()).at(0), c, err)) << err;
  RdmaCounterSample s = to_sample(list_rdma_ports(root.path()).at(0), 1, c);
  EXPECT_EQ(s.xmit_packets, 2826u);
  EXPECT_EQ(s.rcv_packets, 2825u);
  EXPECT_EQ(s.xmit_bytes, 0u);
  EXPECT_EQ(s.hw.at("sent_pkts"), 2826u);
  // Between shipped samples only the packet counters are read.
  write_counter(dir + "/hw_counters", "retry_exceeded_err", 1);
  ASSERT_TRUE(read_port_counters(list_rdma_ports(root.path()).at(0), c, err, false)) << err;
  EXPECT_EQ(c.hw, (std::map<std::string, uint64_t>{{"rcvd_pkts", 2825}, {"sent_pkts", 2826}}));
  EXPECT_EQ(c.xmit_packets, 2826u);
  std::filesystem::remove(dir + "/hw_counters/rcvd_pkts");
  EXPECT_FALSE(read_port_counters(list_rdma_ports(root.path()).at(0), c, err));
  EXPECT_NE(err.find("rcvd_pkts"), std::string::npos) << err;
}

TEST(RdmaSysfs, SoftRoceBytesAreItsInterfacesFixtureInKernelLayout) {
  // Fixture in the kernel's layout (/sys/class/infiniband beside /sys/class/net): rxe0's RoCE GID table
  // names eth0 (gid_attrs/ndevs/0), whose statistics carry the bytes rxe does not count.
  TempDir root;
  const std::string ib = root.path() + "/infiniband", dir = ib + "/rxe0/ports/1";
  write_counter(dir + "/hw_counters", "sent_pkts", 2826);
  write_counter(dir + "/hw_counters", "rcvd_pkts", 2825);
  std::filesystem::create_directories(dir + "/gid_attrs/ndevs");
  std::ofstream(dir + "/gid_attrs/ndevs/0") << "eth0\n";
  write_counter(root.path() + "/net/eth0/statistics", "tx_bytes", 2113807);
  write_counter(root.path() + "/net/eth0/statistics", "rx_bytes", 2113756);
  write_counter(root.path() + "/net/eth0/statistics", "tx_packets", 2451);
  write_counter(root.path() + "/net/eth0/statistics", "rx_packets", 2449);
  const RdmaPortPath port = list_rdma_ports(ib).at(0);
  RawPortCounters c;
  std::string err;
  ASSERT_TRUE(read_port_counters(port, c, err)) << err;
  EXPECT_EQ(c.bytes_from_netdev, "eth0");
  RdmaCounterSample s = to_sample(port, 1, c);
  EXPECT_EQ(s.xmit_bytes, 2113804u);  // whole 4-byte words, as the port counters count
  EXPECT_EQ(s.rcv_bytes, 2113756u);
  EXPECT_EQ(s.xmit_packets, 2451u);  // the interface's, read with its bytes
  EXPECT_EQ(s.rcv_packets, 2449u);
  EXPECT_EQ(s.hw.at("sent_pkts"), 2826u);
  // An interface that is gone (or a name that is a path) leaves the port with packets only, not an error.
  std::ofstream(dir + "/gid_attrs/ndevs/0") << "../../etc\n";
  ASSERT_TRUE(read_port_counters(port, c, err)) << err;
  EXPECT_EQ(c.bytes_from_netdev, "");
  EXPECT_EQ(c.xmit_words, 0u);
  std::filesystem::remove_all(root.path() + "/net");
  std::ofstream(dir + "/gid_attrs/ndevs/0") << "eth0\n";
  ASSERT_TRUE(read_port_counters(port, c, err)) << err;
  EXPECT_EQ(to_sample(port, 2, c).xmit_bytes, 0u);
  EXPECT_EQ(to_sample(port, 2, c).xmit_packets, 2826u);
}

TEST(RdmaSysfs, FixtureMissingCounterIsAClearError) {
  TempDir root;
  PortFixture p(root);
  std::filesystem::remove(p.dir + "/counters/port_rcv_data");
  std::ofstream(p.dir + "/counters/port_xmit_data") << "N/A\n";
  RawPortCounters c;
  std::string err;
  EXPECT_FALSE(read_port_counters(list_rdma_ports(root.path()).at(0), c, err));
  EXPECT_NE(err.find("port_xmit_data"), std::string::npos) << err;
  EXPECT_TRUE(list_rdma_ports(root / "absent").empty());
}

TEST(RdmaSysfs, FixtureCounterDeltaWrapsAndResets) {
  const uint64_t m32 = 0xffffffffull;
  EXPECT_EQ(counter_delta(10, 25).value, 15u);
  auto w32 = counter_delta(m32 - 9, 20);  // 32-bit counter wrapped: 10 to the top, then 20
  EXPECT_EQ(w32.kind, DeltaKind::kWrap32);
  EXPECT_EQ(w32.value, 30u);
  auto w64 = counter_delta(~uint64_t{0} - 4, 5);
  EXPECT_EQ(w64.kind, DeltaKind::kWrap64);
  EXPECT_EQ(w64.value, 10u);
  auto reset = counter_delta(uint64_t{1} << 40, 100);  // a 64-bit counter far from the top went down
  EXPECT_EQ(reset.kind, DeltaKind::kReset);
  EXPECT_EQ(reset.value, 100u);
  auto sat = counter_delta(m32, m32);
  EXPECT_EQ(sat.kind, DeltaKind::kSaturated);
  EXPECT_EQ(sat.value, 0u);
}

TEST(RdmaSysfs, FixtureBurstsFromCounterDeltasWithTheGapRule) {
  TempDir root;
  PortFixture p(root);
  auto port = list_rdma_ports(root.path()).at(0);
  const uint64_t ms = 1'000'000, t0 = 1'700'000'000'000'000'000ull;
  RdmaBurstTracker tr(20 * ms, 1000 * ms);  // gap 20 ms, max burst 1 s
  std::vector<RdmaPortBurst> out;
  auto sample = [&](uint64_t t_ms, uint64_t xw, uint64_t rw, uint64_t xp, uint64_t rp) {
    p.set(xw, rw, xp, rp);
    RawPortCounters c;
    std::string err;
    ASSERT_TRUE(read_port_counters(port, c, err)) << err;
    tr.feed(port.device, port.port, t0 + t_ms * ms, c, out);
  };
  // Counters near the 32-bit top, so the first burst crosses a wrap.
  const uint64_t base = 0xffffffffull - 100;
  sample(0, base, 0, 0, 0);                         // baseline
  sample(10, base + 50, 10, 2, 1);                  // activity in (0,10]
  sample(20, (base + 150) & 0xffffffff, 10, 4, 1);  // wrapped: +100 words
  sample(30, (base + 150) & 0xffffffff, 10, 4, 1);  // idle 10 ms (< gap): burst stays open
  sample(40, (base + 160) & 0xffffffff, 10, 5, 1);  // +10 words: same burst
  EXPECT_TRUE(out.empty());
  sample(50, (base + 160) & 0xffffffff, 10, 5, 1);
  sample(70, (base + 160) & 0xffffffff, 10, 5, 1);  // idle 30 ms since 40 > gap: burst closed
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].device, "mlx5_0");
  EXPECT_EQ(out[0].port, 1u);
  EXPECT_EQ(out[0].first_ns, t0);  // the interval (0,10] is where it began
  EXPECT_EQ(out[0].last_ns, t0 + 40 * ms);
  EXPECT_EQ(out[0].xmit_bytes, 160u * 4);  // words x 4 across the wrap
  EXPECT_EQ(out[0].rcv_bytes, 10u * 4);
  EXPECT_EQ(out[0].xmit_packets, 5u);
  EXPECT_EQ(out[0].rcv_packets, 1u);
  EXPECT_EQ(tr.stats().wraps, 1u);
  // A second burst, flushed at shutdown.
  sample(80, (base + 170) & 0xffffffff, 10, 6, 1);
  tr.flush(out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].first_ns, t0 + 70 * ms);
  EXPECT_EQ(out[1].xmit_bytes, 40u);
}

TEST(RdmaSysfs, FixtureCountersOnlySamplesAtEveryTickOfItsPeriod) {
  // The agent's loop ticks every sampling period and runs the source a little after each tick (here 0.1-0.5
  // ms, varying). Counters-only mode must read at every tick: a port busy throughout gives one burst per
  // period.
  TempDir root;
  PortFixture p(root);
  RdmaSourceOptions o;
  o.sysfs_root = root.path();
  o.sample_ns = 10'000'000;
  o.ship_samples_ns = 1'000'000'000;
  o.qp_refresh_ns = 1'000'000'000'000;
  o.gap_ns = 20'000'000;
  o.max_burst_ns = 10'000'000;
  o.series = true;
  MonoToRealtime clock;
  RdmaSource src(o, clock);
  ASSERT_TRUE(src.sampling());
  Batcher out("n0", 1, BatcherOptions{1u << 20, 1'000'000'000});
  const uint64_t t0 = 1'000'000'000;
  for (uint64_t k = 0; k <= 100; ++k) {
    p.set(1000 * k, 0, 10 * k, 0);
    src.tick(t0 + k * o.sample_ns + 100'000 + (k * 37'000) % 400'000, out);
  }
  EXPECT_GE(out.seal(0, {}).rdma_bursts.size(), 99u);
}

TEST(RdmaSysfs, FixtureLongBurstIsCutAtTheMaximumDuration) {
  const uint64_t ms = 1'000'000;
  RdmaBurstTracker tr(20 * ms, 100 * ms);
  std::vector<RdmaPortBurst> out;
  RawPortCounters c;
  for (uint64_t t = 0; t <= 250; t += 10) {
    c.xmit_words += 1000;
    tr.feed("d", 1, (t + 1) * ms, c, out);
  }
  tr.flush(out);
  ASSERT_GE(out.size(), 3u);
  uint64_t total = 0;
  for (const auto& b : out) {
    EXPECT_LE(b.last_ns - b.first_ns, 100 * ms);
    total += b.xmit_bytes;
  }
  EXPECT_EQ(total, 25u * 1000 * 4);  // cutting never loses bytes
}

TEST(RdmaNetlink, FixtureQpTableDecoded) {
  NlBuilder b;
  qp_message(b, 3, "mlx5_0");
  b.done();
  std::vector<QpEntry> qps;
  auto r = parse_qp_messages(b.bytes().data(), b.bytes().size(), qps);
  ASSERT_TRUE(r) << r.error;
  EXPECT_TRUE(r.done);
  ASSERT_EQ(qps.size(), 2u);
  EXPECT_EQ(qps[0].device, "mlx5_0");
  EXPECT_EQ(qps[0].port, 1u);
  EXPECT_EQ(qps[0].lqpn, 0x1a2u);
  EXPECT_EQ(qps[0].rqpn, 0x3b4u);
  EXPECT_EQ(qps[0].type, "RC");
  EXPECT_EQ(qps[0].state, "RTS");
  EXPECT_EQ(qps[0].pid, 4242u);
  EXPECT_EQ(qps[1].lqpn, 1u);
  EXPECT_EQ(qps[1].type, "GSI");
  EXPECT_EQ(qps[1].comm, "[ib_core]");

  // Addresses come from the CM table; the comm of a user QP from its pid.
  NlBuilder cm;
  cm.begin_msg(RDMA_NLDEV_CMD_RES_CM_ID_GET);
  cm.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 3);
  cm.str(RDMA_NLDEV_ATTR_DEV_NAME, "mlx5_0");
  cm.begin_nest(RDMA_NLDEV_ATTR_RES_CM_ID);
  cm.begin_nest(RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY);
  cm.u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
  cm.u32(RDMA_NLDEV_ATTR_RES_LQPN, 0x1a2);
  sockaddr_attr(cm, RDMA_NLDEV_ATTR_RES_SRC_ADDR, "10.213.7.1");
  sockaddr_attr(cm, RDMA_NLDEV_ATTR_RES_DST_ADDR, "10.213.7.2");
  cm.end_nest();
  cm.begin_nest(RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY);  // a listener: no QP
  sockaddr_attr(cm, RDMA_NLDEV_ATTR_RES_SRC_ADDR, "fd00::1");
  cm.end_nest();
  cm.end_nest();
  cm.end_msg();
  cm.done();
  std::vector<CmIdEntry> ids;
  auto rc = parse_cm_id_messages(cm.bytes().data(), cm.bytes().size(), ids);
  ASSERT_TRUE(rc) << rc.error;
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[1].src_addr, "fd00::1");
  complete_qp_table(qps, ids,
                    [](uint32_t pid) { return pid == 4242 ? std::string("python3") : std::string(); });
  EXPECT_EQ(qps[0].src_addr, "10.213.7.1");
  EXPECT_EQ(qps[0].dst_addr, "10.213.7.2");
  EXPECT_EQ(qps[0].comm, "python3");
  EXPECT_EQ(qps[1].src_addr, "");
  EXPECT_EQ(qps[1].comm, "[ib_core]");
}

TEST(RdmaNetlink, FixtureSeveralMessagesAndDevices) {
  NlBuilder b;
  qp_message(b, 0, "mlx5_0");
  qp_message(b, 1, "mlx5_1");
  std::vector<QpEntry> qps;
  auto r = parse_qp_messages(b.bytes().data(), b.bytes().size(), qps);
  ASSERT_TRUE(r) << r.error;
  EXPECT_FALSE(r.done);  // no DONE yet: the dump continues in the next buffer
  ASSERT_EQ(qps.size(), 4u);
  EXPECT_EQ(qps[2].device, "mlx5_1");

  NlBuilder d;
  d.begin_msg(RDMA_NLDEV_CMD_GET);
  d.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 5);
  d.str(RDMA_NLDEV_ATTR_DEV_NAME, "rxe0");
  d.end_msg();
  d.done();
  std::vector<RdmaDevice> devs;
  ASSERT_TRUE(parse_dev_messages(d.bytes().data(), d.bytes().size(), devs));
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].index, 5u);
  EXPECT_EQ(devs[0].name, "rxe0");
}

TEST(RdmaNetlink, FixtureMalformedInputIsAnErrorNotACrash) {
  NlBuilder b;
  qp_message(b, 0, "mlx5_0");
  auto bytes = b.bytes();
  std::vector<QpEntry> qps;
  // Every truncation of a valid message: an error or fewer rows, never a read past the buffer.
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    qps.clear();
    auto r = parse_qp_messages(bytes.data(), n, qps);
    if (n > 0) {
      EXPECT_FALSE(r) << n;
    }
  }
  // An attribute claiming more than its message holds.
  auto bad = bytes;
  uint16_t huge = 0xfff0;
  std::memcpy(bad.data() + sizeof(nlmsghdr), &huge, 2);
  qps.clear();
  auto r = parse_qp_messages(bad.data(), bad.size(), qps);
  EXPECT_FALSE(r);
  EXPECT_NE(r.error.find("malformed"), std::string::npos) << r.error;
  // The kernel's answer to a request it refuses.
  NlBuilder e;
  e.error(-EOPNOTSUPP);
  r = parse_qp_messages(e.bytes().data(), e.bytes().size(), qps);
  EXPECT_FALSE(r);
  EXPECT_NE(r.error.find("not supported"), std::string::npos) << r.error;
  // A hostile error code (fuzz_rdma_netlink found INT_MIN, whose negation is undefined) and a positive one
  // are named by their number.
  for (int code : {std::numeric_limits<int>::min(), 5, -4096}) {
    NlBuilder h;
    h.error(code);
    r = parse_qp_messages(h.bytes().data(), h.bytes().size(), qps);
    EXPECT_FALSE(r);
    EXPECT_NE(r.error.find("error code " + std::to_string(code) + " is not an errno"), std::string::npos)
        << r.error;
  }
}

TEST(RdmaNetlink, FixtureTypeAndStateNames) {
  EXPECT_EQ(qp_type_name(4), "UD");
  EXPECT_EQ(qp_type_name(8), "RAW_PACKET");
  EXPECT_EQ(qp_type_name(77), "TYPE_77");
  EXPECT_EQ(qp_state_name(6), "ERR");
  EXPECT_EQ(qp_state_name(9), "STATE_9");
}

TEST(RdmaNetlink, LiveQueryWithoutDevicesDoesNotFail) {
  // This machine has no RDMA devices: the query either succeeds with an empty table or reports why RDMA
  // netlink is unavailable. Either way it returns promptly.
  std::vector<QpEntry> qps;
  std::string err;
  bool ok = read_qp_table(qps, err);
  if (ok)
    EXPECT_TRUE(qps.empty());
  else
    EXPECT_FALSE(err.empty());
}
