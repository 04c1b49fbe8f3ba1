// CPU cost of the agent's RDMA port sampling (counters-only mode samples every 10 ms): per second of agent
// time, at 10 ms and 100 ms, for one soft-RoCE-like port (4 counters + 30 hw_counters, the files rxe has) in
// a fixture tree on tmpfs-like storage, read through the agent's own code (read_port_counters, the burst
// tracker, the shipped sample). Baseline, measured in the same run: waking up at the same rate and reading
// nothing. Prints one line per interval and a JSON summary.
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "rdma/sysfs.hpp"

using namespace netprism;
using namespace netprism::agent;

namespace {

double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void sleep_until(uint64_t t) {
  timespec ts{static_cast<time_t>(t / 1'000'000'000ull), static_cast<long>(t % 1'000'000'000ull)};
  clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
}

// CPU seconds per second of running `seconds` long with one wake-up every interval, reading when `read`:
// every hw_counters file once a second (the shipped sample), only the byte and packet counters between, as
// the agent does; every file at every reading when `all_hw` (the agent before 2026-11-30).
double run(const std::vector<RdmaPortPath>& ports, uint64_t interval_ns, double seconds, bool read,
           bool all_hw = false) {
  RdmaBurstTracker tracker(2 * interval_ns, interval_ns);
  std::vector<RdmaPortBurst> out;
  const double c0 = cpu_s();
  const uint64_t t0 = mono_ns(), end = t0 + static_cast<uint64_t>(seconds * 1e9);
  uint64_t next_ship = t0;
  for (uint64_t t = t0; t < end; t += interval_ns) {
    sleep_until(t);
    if (!read) continue;
    const bool ship = all_hw || t >= next_ship;
    if (t >= next_ship) next_ship = t + 1'000'000'000ull;
    for (const auto& p : ports) {
      RawPortCounters c;
      std::string err;
      if (!read_port_counters(p, c, err, ship)) std::fprintf(stderr, "read: %s\n", err.c_str());
      tracker.feed(p.device, p.port, t, c, out);
      volatile auto s = to_sample(p, t, c).xmit_bytes;
      (void)s;
    }
    out.clear();
  }
  return (cpu_s() - c0) / (static_cast<double>(mono_ns() - t0) * 1e-9);
}

}  // namespace

int main() {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("np_rdma_bench_" + std::to_string(::getpid()));
  const fs::path port = root / "rxe0" / "ports" / "1";
  fs::create_directories(port / "counters");
  fs::create_directories(port / "hw_counters");
  for (const char* f : {"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"})
    std::ofstream(port / "counters" / f) << 123456789 << "\n";
  for (int i = 0; i < 30; ++i)
    std::ofstream(port / "hw_counters" / ("counter_" + std::to_string(i))) << i << "\n";
  const auto ports = list_rdma_ports(root.string());
  const double seconds = 3;
  std::printf("{");
  for (uint64_t ms : {10, 100}) {
    double idle = run(ports, ms * 1'000'000ull, seconds, false);
    double busy = run(ports, ms * 1'000'000ull, seconds, true);
    std::fprintf(stderr,
                 "sampling every %3llu ms: %.3f %% of a core (waking alone: %.3f %%; reading: %.3f %%)\n",
                 static_cast<unsigned long long>(ms), busy * 100, idle * 100, (busy - idle) * 100);
    std::printf("%s\"cpu_pct_%llums\": %.4f, \"wakeup_pct_%llums\": %.4f", ms == 10 ? "" : ", ",
                static_cast<unsigned long long>(ms), busy * 100, static_cast<unsigned long long>(ms),
                idle * 100);
  }
  const double all = run(ports, 10'000'000ull, seconds, true, true);
  std::fprintf(stderr, "sampling every  10 ms reading every hw counter each time: %.3f %% of a core\n",
               all * 100);
  std::printf(", \"cpu_pct_10ms_all_hw\": %.4f}\n", all * 100);
  fs::remove_all(root);
  return 0;
}
