// The probe in the real kernel: a veth pair into a fresh network namespace, a real TCP transfer of exactly
// N bytes, a 50 ms pause, N more bytes. The data direction must yield exactly two bursts (one cut by the
// gap, one closed by the idle flush) whose payload totals are exactly 2N. Runs with tc (data leaves through
// the probed interface: egress) and with XDP (data arrives on it: ingress). Also: attaching replaces the
// probe's own stale filters/programs and refuses foreign ones.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <netinet/in.h>
#include <linux/tcp.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "baseline.skel.h"
#include "bpf/prog_run.hpp"
#include "bpf/veth_netns.hpp"
#include "probe.hpp"
#include "support/privileged.hpp"

namespace netprism::test {
namespace {

using agent::AttachMode;
using agent::monotonic_now_ns;
using agent::Probe;
using agent::ProbeOptions;
using namespace std::chrono_literals;

using Sock = Socket;  // veth_netns.hpp

bool send_all(int fd, std::size_t n) {
  std::vector<char> buf(64 * 1024, 'x');
  while (n > 0) {
    ssize_t w = send(fd, buf.data(), std::min(n, buf.size()), MSG_NOSIGNAL);
    if (w <= 0) return false;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool wait_for(const std::atomic<uint64_t>& v, uint64_t want, std::chrono::seconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (v.load() < want) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(200us);
  }
  return true;
}

struct Transfer {
  std::vector<np_flowlet> bursts;  // everything the probe emitted
  uint16_t sender_port = 0, receiver_port = 0;
  uint64_t received = 0;
  // Bytes the sender's TCP retransmitted (tcpi_bytes_retrans) by the end of the pause and by the end. The
  // probe counts every packet it sees, retransmissions included (issue 3), and a veth does drop now and then
  // (a plain transfer without any probe retransmitted a 45-segment GSO packet in 2 of 15 runs here).
  uint64_t retrans_first = 0, retrans_total = 0;
};

uint64_t bytes_retrans(int fd) {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_bytes_retrans) + sizeof ti.tcpi_bytes_retrans)
    throw std::runtime_error("TCP_INFO without tcpi_bytes_retrans");
  return ti.tcpi_bytes_retrans;
}

// N bytes, a 50 ms pause, N more bytes from `sender_in_ns ? ns : host` to the other side.
// Gap and pause scale: 1 here; the emulated 6.1 VM (tests/bpf/vm_variants.py) sets NP_VETH_SLOW=10, because
// its vCPUs, descheduled by the loaded host, stall a transfer for tens of ms (4 and 11 bursts instead of 2
// with the 20 ms gap).
uint64_t slow_factor() {
  const char* s = std::getenv("NP_VETH_SLOW");
  uint64_t f = s ? std::strtoull(s, nullptr, 10) : 1;
  return f ? f : 1;
}

Transfer run_transfer(const VethNetns& net, Probe& probe, std::size_t n, bool sender_in_ns) {
  Transfer t;
  std::atomic<uint64_t> received{0};
  std::atomic<uint16_t> port{0};
  std::atomic<bool> failed{false};
  std::string recv_ip = sender_in_ns ? net.host_ip : net.ns_ip;
  std::thread receiver([&] {
    try {
      if (!sender_in_ns) net.enter();
      Sock ls(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      int one = 1;
      setsockopt(ls.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      auto a = addr_of(recv_ip, 0);
      socklen_t len = sizeof a;
      if (bind(ls.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(ls.fd, 1) != 0 ||
          getsockname(ls.fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        throw std::runtime_error("listen");
      port = ntohs(a.sin_port);
      Sock c(accept(ls.fd, nullptr, nullptr));
      if (c.fd < 0) throw std::runtime_error("accept");
      std::vector<char> buf(256 * 1024);
      while (received < 2 * n) {
        ssize_t r = recv(c.fd, buf.data(), buf.size(), 0);
        if (r <= 0) break;
        received += static_cast<uint64_t>(r);
      }
      // Keep the connection open until the sender closes: no FIN inside the measured window.
      while (recv(c.fd, buf.data(), buf.size(), 0) > 0) {
      }
    } catch (...) {
      failed = true;
      port = 1;
    }
  });
  std::thread sender([&] {
    try {
      if (sender_in_ns) net.enter();
      while (port == 0) std::this_thread::sleep_for(1ms);
      if (failed) return;
      Sock s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      auto a = addr_of(recv_ip, port);
      if (connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect");
      sockaddr_in me{};
      socklen_t len = sizeof me;
      getsockname(s.fd, reinterpret_cast<sockaddr*>(&me), &len);
      t.sender_port = ntohs(me.sin_port);
      t.receiver_port = port;
      if (!send_all(s.fd, n) || !wait_for(received, n, 20s)) throw std::runtime_error("first half");
      std::this_thread::sleep_for(50ms * slow_factor());
      t.retrans_first = bytes_retrans(s.fd);
      if (!send_all(s.fd, n) || !wait_for(received, 2 * n, 20s)) throw std::runtime_error("second half");
      // Let the last burst go idle, then flush it, all before the FIN.
      std::this_thread::sleep_for(std::chrono::nanoseconds(3 * probe.gap_ns()));
      t.retrans_total = bytes_retrans(s.fd);
      probe.poll([&](const np_flowlet& f) { t.bursts.push_back(f); });
      probe.flush_idle(monotonic_now_ns(), false, [&](const np_flowlet& f) { t.bursts.push_back(f); });
    } catch (...) {
      failed = true;
    }
  });
  sender.join();
  receiver.join();
  EXPECT_FALSE(failed) << "the TCP transfer failed";
  t.received = received;
  return t;
}

class ProbeVeth : public ::testing::TestWithParam<std::tuple<AttachMode, agent::ProbeVariant>> {
 protected:
  void SetUp() override {
    NP_REQUIRE_ROOT();
    net_ = std::make_unique<VethNetns>();
  }
  std::unique_ptr<VethNetns> net_;
};

TEST_P(ProbeVeth, TwoTransfersSeparatedBy50msGiveTwoExactBursts) {
  const auto [mode, variant] = GetParam();
  std::string err;
  ProbeOptions o;
  o.variant = variant;
  // 20 ms: well under the 50 ms pause, well above scheduling stalls of a loaded 2-core test machine (the
  // 4 ms default is for training traffic; this test is about the mechanism, not the default).
  o.gap_ns = 20'000'000 * slow_factor();
  o.max_burst_ns = 10'000'000'000ULL;
  auto probe = Probe::open(o, err);
  ASSERT_TRUE(probe) << err;
  ASSERT_EQ(probe->variant(), variant);
  ASSERT_TRUE(probe->attach(net_->host_if, mode, err)) << err;
  std::mt19937 rng(std::random_device{}());
  const std::size_t n = 1'000'000 + rng() % 1'000'000;
  // tc: data leaves through the probed interface (egress); XDP: data arrives on it (ingress).
  const bool sender_in_ns = mode == AttachMode::kXdp;
  const uint64_t start = monotonic_now_ns();
  Transfer t = run_transfer(*net_, *probe, n, sender_in_ns);
  const uint64_t end = monotonic_now_ns();
  ASSERT_EQ(t.received, 2 * n);

  const uint32_t ifindex = if_nametoindex(net_->host_if.c_str());
  const uint8_t data_dir = mode == AttachMode::kTc ? NP_DIR_EGRESS : NP_DIR_INGRESS;
  std::vector<np_flowlet> data;
  uint64_t reverse_payload = 0, reverse_packets = 0, reverse_bursts = 0;
  for (const auto& f : t.bursts) {
    if (f.key.ifindex != ifindex || f.key.proto != NP_PROTO_TCP) continue;
    if (f.key.sport == t.sender_port && f.key.dport == t.receiver_port) {
      EXPECT_EQ(f.key.dir, data_dir);
      data.push_back(f);
    } else if (f.key.sport == t.receiver_port && f.key.dport == t.sender_port) {
      reverse_payload += f.payload_bytes;
      reverse_packets += f.packets;
      ++reverse_bursts;
      EXPECT_NE(f.key.dir, data_dir);
      // tc ingress reads the clock for the ACKs (their arrival): CLOCK_MONOTONIC, like the bounds.
      EXPECT_GE(f.first_ns, start);
      EXPECT_LE(f.first_ns, f.last_ns);
      EXPECT_LE(f.last_ns, end);
    }
  }
  ASSERT_EQ(data.size(), 2u) << "expected exactly one burst per half of the transfer";
  std::sort(data.begin(), data.end(), [](const auto& a, const auto& b) { return a.first_ns < b.first_ns; });
  EXPECT_EQ(data[0].end_reason, NP_END_GAP);
  EXPECT_EQ(data[1].end_reason, NP_END_IDLE_FLUSH);
  // Exactly the bytes sent, plus what TCP retransmitted (0 in most runs). On tc egress the probe sees every
  // transmission, a lost one included (a veth drops after its egress hook): exact. XDP runs after the point
  // where a veth drops, so it sees each byte at least once and a retransmission only if it was not the
  // original that got lost.
  const uint64_t r0 = t.retrans_first, r1 = t.retrans_total - t.retrans_first;
  if (mode == AttachMode::kTc) {
    EXPECT_EQ(data[0].payload_bytes, n + r0);
    EXPECT_EQ(data[1].payload_bytes, n + r1);
    EXPECT_EQ(data[0].payload_bytes + data[1].payload_bytes, 2 * n + t.retrans_total);
  } else {
    EXPECT_GE(data[0].payload_bytes, n);
    EXPECT_LE(data[0].payload_bytes, n + r0);
    EXPECT_GE(data[1].payload_bytes, n);
    EXPECT_LE(data[1].payload_bytes, n + r1);
  }
  if (t.retrans_total) std::printf("TCP retransmitted %llu bytes\n", (unsigned long long)t.retrans_total);
  EXPECT_GE(data[1].first_ns - data[0].last_ns, 50'000'000u * slow_factor())
      << "the pause is between the bursts";
  // On tc the times come from TCP's departure times, on XDP from the clock: both CLOCK_MONOTONIC.
  EXPECT_GE(data[0].first_ns, start);
  EXPECT_LE(data[1].last_ns, end);
  EXPECT_TRUE(data[0].tcp_flags & 0x02) << "the first burst holds the SYN";
  EXPECT_GE(data[0].packets, n / 65536);
  EXPECT_GT(data[0].bytes, n);
  EXPECT_EQ(reverse_payload, 0u) << "the receiver only sends ACKs";
  if (mode == AttachMode::kTc) {
    EXPECT_GT(reverse_packets, 0u) << "tc ingress sees the ACKs";
    EXPECT_GE(reverse_bursts, 2u) << "the ACKs pause with the data";
  }
  char src[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, data[0].key.saddr + 12, src, sizeof src);
  EXPECT_EQ(src, sender_in_ns ? net_->ns_ip : net_->host_ip);
  auto c = probe->counters();
  EXPECT_EQ(c[NP_CNT_RINGBUF_FULL], 0u);
  EXPECT_EQ(c[NP_CNT_MAP_FULL], 0u);
  EXPECT_EQ(c[NP_CNT_MAP_BUSY], 0u);
  EXPECT_EQ(c[NP_CNT_FLOW_RACE], 0u);
  EXPECT_EQ(c[NP_CNT_TRUNCATED], 0u);
  EXPECT_GT(c[NP_CNT_PACKETS], 2 * n / 65536);
}

INSTANTIATE_TEST_SUITE_P(Modes, ProbeVeth,
                         ::testing::Combine(::testing::Values(AttachMode::kTc, AttachMode::kXdp),
                                            ::testing::ValuesIn(kVariants)),
                         [](const auto& i) {
                           return std::string(std::get<0>(i.param) == AttachMode::kTc ? "tc_" : "xdp_") +
                                  agent::variant_name(std::get<1>(i.param));
                         });

// ---- attach ownership ----
struct BaselineDeleter {
  void operator()(baseline* b) const { baseline::destroy(b); }
};

uint32_t tc_prog_at_our_slot(int ifindex, bpf_tc_attach_point point) {
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = point);
  LIBBPF_OPTS(bpf_tc_opts, q, .handle = 0x4e50, .priority = 0xff4e);
  return bpf_tc_query(&hook, &q) == 0 ? q.prog_id : 0;
}

uint32_t xdp_prog(int ifindex) {
  uint32_t id = 0;
  bpf_xdp_query_id(ifindex, 0, &id);
  return id;
}

class ProbeAttach : public ProbeVeth {};

TEST_F(ProbeAttach, StaleOwnTcFiltersAreReplacedAndDetachIsClean) {
  std::string err;
  int ifindex = static_cast<int>(if_nametoindex(net_->host_if.c_str()));
  auto crashed = Probe::open({}, err);  // stands for an agent run that died without detaching
  ASSERT_TRUE(crashed) << err;
  ASSERT_TRUE(crashed->attach(net_->host_if, AttachMode::kTc, err)) << err;
  uint32_t old_in = tc_prog_at_our_slot(ifindex, BPF_TC_INGRESS);
  ASSERT_NE(old_in, 0u);
  {
    auto fresh = Probe::open({}, err);
    ASSERT_TRUE(fresh) << err;
    ASSERT_TRUE(fresh->attach(net_->host_if, AttachMode::kTc, err)) << err;
    uint32_t now_in = tc_prog_at_our_slot(ifindex, BPF_TC_INGRESS);
    EXPECT_NE(now_in, 0u);
    EXPECT_NE(now_in, old_in) << "the stale filter was replaced";
    EXPECT_NE(tc_prog_at_our_slot(ifindex, BPF_TC_EGRESS), 0u);
  }
  EXPECT_EQ(tc_prog_at_our_slot(ifindex, BPF_TC_INGRESS), 0u) << "detached on destruction";
  EXPECT_EQ(tc_prog_at_our_slot(ifindex, BPF_TC_EGRESS), 0u);
  crashed.reset();  // its filters are gone already: must not fail or remove anything else
}

TEST_F(ProbeAttach, ForeignTcFilterIsNeverReplaced) {
  std::string err;
  int ifindex = static_cast<int>(if_nametoindex(net_->host_if.c_str()));
  std::unique_ptr<baseline, BaselineDeleter> other(baseline::open_and_load());
  ASSERT_TRUE(other);
  LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_INGRESS);
  bpf_tc_hook_create(&hook);
  LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = bpf_program__fd(other->progs.np_baseline_tc), .handle = 0x4e50,
              .priority = 0xff4e);
  ASSERT_EQ(bpf_tc_attach(&hook, &o), 0);
  auto probe = Probe::open({}, err);
  ASSERT_TRUE(probe) << err;
  EXPECT_FALSE(probe->attach(net_->host_if, AttachMode::kTc, err));
  EXPECT_NE(err.find("refusing"), std::string::npos) << err;
  EXPECT_EQ(tc_prog_at_our_slot(ifindex, BPF_TC_INGRESS), o.prog_id) << "the foreign filter is untouched";
  probe.reset();
  EXPECT_EQ(tc_prog_at_our_slot(ifindex, BPF_TC_INGRESS), o.prog_id);
  // A foreign filter elsewhere on the hook does not bother us, and survives our attach and detach.
  LIBBPF_OPTS(bpf_tc_hook, eh, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
  LIBBPF_OPTS(bpf_tc_opts, o2, .prog_fd = bpf_program__fd(other->progs.np_baseline_tc), .handle = 1,
              .priority = 1);
  ASSERT_EQ(bpf_tc_attach(&eh, &o2), 0);
  LIBBPF_OPTS(bpf_tc_opts, d, .handle = 0x4e50, .priority = 0xff4e);
  ASSERT_EQ(bpf_tc_detach(&hook, &d), 0);
  probe = Probe::open({}, err);
  ASSERT_TRUE(probe->attach(net_->host_if, AttachMode::kTc, err)) << err;
  probe.reset();
  LIBBPF_OPTS(bpf_tc_opts, q, .handle = 1, .priority = 1);
  EXPECT_EQ(bpf_tc_query(&eh, &q), 0);
  EXPECT_EQ(q.prog_id, o2.prog_id);
}

TEST_F(ProbeAttach, XdpReplacesOwnStaleProgramButNeverAForeignOne) {
  std::string err;
  int ifindex = static_cast<int>(if_nametoindex(net_->host_if.c_str()));
  auto crashed = Probe::open({}, err);
  ASSERT_TRUE(crashed) << err;
  ASSERT_TRUE(crashed->attach(net_->host_if, AttachMode::kXdp, err)) << err;
  uint32_t old_id = xdp_prog(ifindex);
  ASSERT_NE(old_id, 0u);
  {
    auto fresh = Probe::open({}, err);
    ASSERT_TRUE(fresh->attach(net_->host_if, AttachMode::kXdp, err)) << err;
    EXPECT_NE(xdp_prog(ifindex), old_id);
    EXPECT_NE(xdp_prog(ifindex), 0u);
  }
  EXPECT_EQ(xdp_prog(ifindex), 0u);
  crashed.reset();

  std::unique_ptr<baseline, BaselineDeleter> other(baseline::open_and_load());
  ASSERT_TRUE(other);
  ASSERT_EQ(bpf_xdp_attach(ifindex, bpf_program__fd(other->progs.np_baseline_xdp), 0, nullptr), 0);
  uint32_t foreign = xdp_prog(ifindex);
  auto probe = Probe::open({}, err);
  EXPECT_FALSE(probe->attach(net_->host_if, AttachMode::kXdp, err));
  EXPECT_NE(err.find("refusing"), std::string::npos) << err;
  probe.reset();
  EXPECT_EQ(xdp_prog(ifindex), foreign);
  bpf_xdp_detach(ifindex, 0, nullptr);
}

TEST_F(ProbeAttach, UnknownInterfaceIsAClearError) {
  std::string err;
  auto probe = Probe::open({}, err);
  ASSERT_TRUE(probe) << err;
  EXPECT_FALSE(probe->attach("np-no-such-if0", AttachMode::kTc, err));
  EXPECT_NE(err.find("no interface"), std::string::npos) << err;
}

}  // namespace
}  // namespace netprism::test
