// netprism-agent as a process: in its own network namespace, with the real probe on the namespace's
// loopback, a fixture RDMA sysfs tree (--rdma-sysfs) and a test aggregator on an ipc:// endpoint (reachable
// across namespaces). The RDMA counters change under the running agent; what it ships must be words x 4,
// cut into bursts by the gap rule, with Unix-epoch times -- and SIGTERM must end it cleanly.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "agent/test_aggregator.hpp"
#include "agent/test_util.hpp"
#include "support/privileged.hpp"

using namespace netprism;
using netprism::test::TempDir;
using netprism::test::TestAggregator;

namespace {

void write_atomic(const std::string& path, uint64_t v) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  { std::ofstream(path + ".new") << v << "\n"; }
  std::filesystem::rename(path + ".new", path);  // the agent never reads a half-written counter
}

struct Counters4 {
  std::string dir;
  void set(uint64_t xw, uint64_t rw, uint64_t xp, uint64_t rp) {
    write_atomic(dir + "/counters/port_xmit_data", xw);
    write_atomic(dir + "/counters/port_rcv_data", rw);
    write_atomic(dir + "/counters/port_xmit_packets", xp);
    write_atomic(dir + "/counters/port_rcv_packets", rp);
    write_atomic(dir + "/hw_counters/out_of_sequence", xp / 10);
  }
};

int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

}  // namespace

TEST(AgentBinary, FixtureRdmaSysfsShipsSamplesAndBurstsThenStopsCleanly) {
  NP_REQUIRE_ROOT();
  TempDir t;
  std::string ns = "nprd" + std::to_string(getpid());
  ASSERT_EQ(sh("ip netns add " + ns), 0);
  struct NsGuard {
    std::string ns;
    ~NsGuard() { sh("ip netns del " + ns); }
  } guard{ns};
  ASSERT_EQ(sh("ip -n " + ns + " link set lo up"), 0);

  Counters4 port{t / "ib/mlx5_0/ports/1"};
  port.set(0, 0, 0, 0);
  std::ofstream(t / "agent.toml") << "[rdma]\nsample_interval_ms = 10\nship_samples_ms = 200\n"
                                  << "[delivery]\nlinger_ms = 3000\n";

  zmq::context_t ctx{1};
  TestAggregator agg(ctx, "ipc://" + (t / "agg.sock"));
  agg.keep_batches = true;

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string agg_ep = "ipc://" + (t / "agg.sock"), spool = t / "spool", ib = t / "ib",
                cfg = t / "agent.toml";
    execlp("ip", "ip", "netns", "exec", ns.c_str(), NP_AGENT_BIN, "--aggregator", agg_ep.c_str(), "--node",
           "rdma-fixture", "--iface", "lo", "--spool-dir", spool.c_str(), "--rdma-sysfs", ib.c_str(),
           "--config", cfg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reaper{pid};

  auto pump_for = [&](int ms) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) agg.pump(5);
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (agg.hellos == 0 && std::chrono::steady_clock::now() < deadline) agg.pump(20);
  ASSERT_GE(agg.hellos, 1u) << "the agent never said HELLO";
  pump_for(300);  // baseline samples

  port.set(1000, 500, 10, 5);  // first burst
  pump_for(400);               // idle well past the RDMA gap (2 samples = 20 ms)
  port.set(3000, 500, 30, 5);  // second burst
  pump_for(400);

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = -1;
  auto stop_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < stop_by) {
    agg.pump(10);
    if (waitpid(pid, &status, WNOHANG) == pid) {
      reaper.pid = -1;
      break;
    }
  }
  ASSERT_EQ(reaper.pid, -1) << "the agent did not exit after SIGTERM";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  pump_for(100);

  uint64_t xb = 0, rb = 0, xp = 0, rp = 0, max_sample = 0;
  std::size_t bursts = 0, samples = 0;
  const uint64_t now = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::system_clock::now().time_since_epoch())
                                                 .count());
  Counters last;
  for (const auto& b : agg.batches) {
    for (const auto& r : b.rdma_bursts) {
      ++bursts;
      EXPECT_EQ(r.device, "mlx5_0");
      EXPECT_EQ(r.port, 1u);
      EXPECT_LE(r.first_ns, r.last_ns);
      EXPECT_GT(r.first_ns, now - 60'000'000'000ull);  // Unix-epoch ns from this test's minute
      EXPECT_LE(r.last_ns, now);
      xb += r.xmit_bytes;
      rb += r.rcv_bytes;
      xp += r.xmit_packets;
      rp += r.rcv_packets;
    }
    for (const auto& s : b.rdma_samples) {
      ++samples;
      EXPECT_EQ(s.xmit_bytes % 4, 0u);
      max_sample = std::max(max_sample, s.xmit_bytes);
      EXPECT_TRUE(s.hw.count("out_of_sequence"));
    }
    last = b.counters;
  }
  EXPECT_EQ(bursts, 2u);
  EXPECT_EQ(xb, 3000u * 4);  // words x 4
  EXPECT_EQ(rb, 500u * 4);
  EXPECT_EQ(xp, 30u);
  EXPECT_EQ(rp, 5u);
  EXPECT_GT(samples, 0u);
  EXPECT_LE(max_sample, 3000u * 4);
  EXPECT_GT(last["rdma_samples"], 0u);
  EXPECT_EQ(last["rdma_read_errors"], 0u);
  EXPECT_TRUE(last.count("probe_packets"));
  EXPECT_TRUE(last.count("budget_level"));
}
