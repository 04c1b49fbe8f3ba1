// Per-packet cost and throughput impact of the probe, each as a ratio against a baseline measured in the same
// run (contracts.md "Benchmark baselines": one per-CPU array update of the packet length, returning pass):
//  1. BPF_PROG_TEST_RUN, repeat >= 1e6, TCP and RoCE packets, tc and XDP entry points;
//  2. attached with tc to a veth carrying a real TCP stream and a RoCEv2-shaped UDP stream, cost per
//     invocation from the kernel's bpf_stats (run_time_ns / run_cnt), probe vs baseline attached the same
//     way;
//  3. TCP throughput between namespaces with the probe attached vs without (and vs the baseline program),
//     phases of one long-lived connection, the probe attached and detached between phases.
// Rounds alternate between the sides and medians are reported: the machine is shared. The throughput of a
// veth stream here wanders +-15 % from one 100 ms to the next (a VM on shared cores), so a ratio good to
// ~0.5 % needs ~100 s per arm: the throughput section defaults to 200 rounds of 0.5 s per arm (~5.5 min).
// Usage (root): probe_bench [--repeat N] [--seconds S] [--rounds R] [--sections run,attached,throughput]
//                           [--streams tcp,roce] [--tp-phase S] [--tp-rounds R] [--pin 0|1]
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <net/if.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "baseline.skel.h"
#include "bpf/packet_builder.hpp"
#include "bpf/prog_run.hpp"
#include "bpf/veth_netns.hpp"
#include "netprism/addr.hpp"
#include "probe.hpp"
#include "streams.hpp"

namespace {

using netprism::agent::AttachMode;
using netprism::agent::Probe;
using netprism::agent::ProbeOptions;
using netprism::test::PacketBuilder;
using netprism::test::VethNetns;

struct BaselineDeleter {
  void operator()(baseline* b) const { baseline::destroy(b); }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// kernel.bpf_stats_enabled set for a section (on for the attached costs, off for BPF_PROG_TEST_RUN, whose
// duration would otherwise include the stats accounting: two sched_clock reads per run, ~60 ns on this VM),
// restored on every exit path, a fatal signal included
// (veth_signal::extra runs in the signal handler: only open/write there).
char g_stats_old = '0';
void restore_bpf_stats_from_signal() {
  int fd = open("/proc/sys/kernel/bpf_stats_enabled", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!write(fd, &g_stats_old, 1);
    close(fd);
  }
}
struct BpfStats {
  std::string old;
  explicit BpfStats(bool on) {
    std::ifstream in("/proc/sys/kernel/bpf_stats_enabled");
    std::getline(in, old);
    g_stats_old = old == "1" ? '1' : '0';
    netprism::test::veth_signal::extra = restore_bpf_stats_from_signal;
    std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << (on ? "1" : "0");
  }
  ~BpfStats() {
    std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << (old.empty() ? "0" : old);
    netprism::test::veth_signal::extra = nullptr;
  }
};

struct RunStats {
  uint64_t ns = 0, cnt = 0;
};
RunStats stats_of(int prog_fd) {
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  bpf_obj_get_info_by_fd(prog_fd, &info, &len);
  return {info.run_time_ns, info.run_cnt};
}

// libbpf warns "Exclusivity flag on, cannot modify" whenever bpf_tc_hook_create finds the clsact qdisc
// already there (expected: the probe and the baseline take turns on one interface). Everything else is
// printed.
int quiet_existing_qdisc(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  char buf[512];
  std::vsnprintf(buf, sizeof buf, fmt, args);
  if (std::strstr(buf, "Exclusivity flag on")) return 0;
  return std::fputs(buf, stderr);
}

// The baseline attached to the same hooks as the probe (its own slot), detached on destruction.
struct BaselineTc {
  int ifindex;
  BaselineTc(int ifx, int fd) : ifindex(ifx) {
    for (auto p : {BPF_TC_INGRESS, BPF_TC_EGRESS}) {
      LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex, .attach_point = p);
      bpf_tc_hook_create(&h);
      LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = fd, .handle = 0x4e51, .priority = 0xff4f);
      if (bpf_tc_attach(&h, &o)) throw std::runtime_error("baseline attach");
    }
  }
  ~BaselineTc() {
    for (auto p : {BPF_TC_INGRESS, BPF_TC_EGRESS}) {
      LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex, .attach_point = p);
      LIBBPF_OPTS(bpf_tc_opts, o, .handle = 0x4e51, .priority = 0xff4f);
      bpf_tc_detach(&h, &o);
    }
  }
};

ProbeOptions agent_like_options() {
  // As the agent runs it: default thresholds, its aggregator connection excluded.
  ProbeOptions o;
  o.exclude.push_back({*netprism::parse_addr("10.254.0.1"), 7470});
  return o;
}

void prog_test_run_section(Probe& probe, baseline& base, uint32_t repeat, int rounds) {
  BpfStats stats_off(false);
  std::printf("== BPF_PROG_TEST_RUN, repeat %u, median of %d alternating rounds ==\n", repeat, rounds);
  std::printf("%-6s %-5s %12s %12s %8s\n", "hook", "pkt", "baseline_ns", "probe_ns", "ratio");
  auto tcp = PacketBuilder().eth().ipv4("10.7.0.1", "10.7.0.2").tcp(40000, 29500, 0x18).payload(1448).build();
  auto roce = PacketBuilder()
                  .eth()
                  .ipv4("10.7.0.1", "10.7.0.2")
                  .udp(49152, NP_ROCE_UDP_PORT)
                  .bth(0x07, 0x11, 1)
                  .payload(1024 + 4)
                  .build();
  struct Hook {
    const char* name;
    bool tc;
    int base_fd, probe_fd;
  } hooks[] = {{"tc", true, bpf_program__fd(base.progs.np_baseline_tc), probe.program_fd("np_tc_egress")},
               {"xdp", false, bpf_program__fd(base.progs.np_baseline_xdp), probe.program_fd("np_xdp")}};
  for (const auto& h : hooks) {
    for (auto [pname, pkt] : {std::pair{"tcp", &tcp}, std::pair{"roce", &roce}}) {
      std::vector<double> b, p;
      for (int r = 0; r < rounds; ++r) {
        b.push_back(netprism::test::run_prog(h.base_fd, h.tc, *pkt, repeat).duration_ns);
        p.push_back(netprism::test::run_prog(h.probe_fd, h.tc, *pkt, repeat).duration_ns);
      }
      std::printf("%-6s %-5s %12.1f %12.1f %8.2f\n", h.name, pname, median(b), median(p),
                  median(p) / median(b));
    }
  }
}

void attached_section(baseline& base, double seconds, int rounds, const std::string& streams) {
  BpfStats stats_on(true);
  std::printf(
      "\n== tc attached to a veth stream, kernel bpf_stats (ns per invocation, ingress+egress), "
      "%.1f s x %d alternating rounds ==\n",
      seconds, rounds);
  std::printf("%-6s %12s %12s %8s %14s %12s  %s\n", "stream", "baseline_ns", "probe_ns", "ratio",
              "round_ratios", "invocations", "probe ns/inv ingress, egress (invocations)");
  VethNetns net;
  int ifindex = static_cast<int>(if_nametoindex(net.host_if.c_str()));
  int base_fd = bpf_program__fd(base.progs.np_baseline_tc);
  for (std::string stream : {"tcp", "roce"}) {
    if (streams.find(stream) == std::string::npos) continue;
    auto traffic = [&] {
      return stream == "tcp" ? netprism::bench::tcp_stream(net, seconds)
                             : netprism::bench::roce_stream(net, seconds);
    };
    std::vector<double> b, p, pin, peg, round_ratio;
    uint64_t invocations = 0, inv_in = 0, inv_eg = 0;
    for (int r = 0; r < rounds; ++r) {
      {
        BaselineTc att(ifindex, base_fd);
        auto s0 = stats_of(base_fd);
        traffic();
        auto s1 = stats_of(base_fd);
        b.push_back(double(s1.ns - s0.ns) / double(std::max<uint64_t>(1, s1.cnt - s0.cnt)));
      }
      {
        std::string err;
        auto probe = Probe::open(agent_like_options(), err);
        if (!probe || !probe->attach(net.host_if, AttachMode::kTc, err)) throw std::runtime_error(err);
        int in = probe->program_fd("np_tc_ingress"), eg = probe->program_fd("np_tc_egress");
        auto i0 = stats_of(in), e0 = stats_of(eg);
        traffic();
        auto i1 = stats_of(in), e1 = stats_of(eg);
        uint64_t cnt = (i1.cnt - i0.cnt) + (e1.cnt - e0.cnt);
        invocations += cnt;
        inv_in += i1.cnt - i0.cnt;
        inv_eg += e1.cnt - e0.cnt;
        p.push_back(double((i1.ns - i0.ns) + (e1.ns - e0.ns)) / double(std::max<uint64_t>(1, cnt)));
        pin.push_back(double(i1.ns - i0.ns) / double(std::max<uint64_t>(1, i1.cnt - i0.cnt)));
        peg.push_back(double(e1.ns - e0.ns) / double(std::max<uint64_t>(1, e1.cnt - e0.cnt)));
        round_ratio.push_back(p.back() / b.back());
        auto c = probe->counters();
        if (c[NP_CNT_RINGBUF_FULL] || c[NP_CNT_MAP_FULL] || c[NP_CNT_MAP_BUSY] || c[NP_CNT_FLOW_RACE] ||
            c[NP_CNT_LOCK_TIMEOUT])
          std::printf("  (loss counters non-zero in this round)\n");
      }
    }
    auto [lo, hi] = std::minmax_element(round_ratio.begin(), round_ratio.end());
    char range[32];
    std::snprintf(range, sizeof range, "%.2f-%.2f", *lo, *hi);
    std::printf("%-6s %12.1f %12.1f %8.2f %14s %12llu  %.1f, %.1f (%llu, %llu)\n", stream.c_str(), median(b),
                median(p), median(p) / median(b), range, (unsigned long long)(invocations / rounds),
                median(pin), median(peg), (unsigned long long)(inv_in / rounds),
                (unsigned long long)(inv_eg / rounds));
  }
}

void throughput_section(baseline& base, double seconds, int rounds, bool pin) {
  // bpf_stats off while throughput is measured, as the agent runs the probe: with stats on, every program
  // run also pays two clock reads and a per-CPU statistics update, a cost of the measurement, not the probe.
  // The probe's own CPU time is measured in separate rounds below.
  BpfStats stats_off(false);
  // Arms, each measured in every round in rotating order so a drift of the machine favours none:
  //   without  - nothing attached;
  //   probe    - the probe attached as the agent attaches it (tc clsact ingress + egress);
  //   baseline - the contract's baseline program at the same hooks: what the hooks cost before the probe
  //              does any work, which splits the loss between the hook and the probe.
  // All phases run on ONE TCP connection; the probe and the baseline are attached and detached between
  // phases. Separate connections per round differ by up to +-10 % here (autotuned buffers, placement),
  // which buried a 1-3 % effect; phases of one connection share all of that.
  constexpr int kArms = 3;
  const double settle = 0.05;
  std::printf(
      "\n== TCP throughput host -> namespace over veth: one connection, %d rounds x %d arms of %.2f s "
      "(+%.2f s settle after each attach/detach)%s ==\n",
      rounds, kArms, seconds, settle, pin ? ", sender and receiver pinned to CPUs 0 and 1" : "");
  VethNetns net;
  netprism::bench::StreamOptions so;
  so.pin = pin;
  std::string err;
  auto probe = Probe::open(agent_like_options(), err);
  if (!probe) throw std::runtime_error(err);
  int ifindex = static_cast<int>(if_nametoindex(net.host_if.c_str()));
  int base_fd = bpf_program__fd(base.progs.np_baseline_tc);
  std::unique_ptr<BaselineTc> base_att;
  std::vector<int> arm_of;
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < kArms; ++k) arm_of.push_back((r + k) % kArms);
  auto set_phase = [&](int ph) {
    probe->detach_all();
    base_att.reset();
    int arm = arm_of[static_cast<std::size_t>(ph)];
    if (arm == 1) {
      std::string aerr;
      if (!probe->attach(net.host_if, AttachMode::kTc, aerr)) throw std::runtime_error(aerr);
    } else if (arm == 2) {
      base_att = std::make_unique<BaselineTc>(ifindex, base_fd);
    }
  };
  auto res = netprism::bench::tcp_stream_phased(net, static_cast<int>(arm_of.size()), seconds, settle,
                                                set_phase, so);
  probe->detach_all();
  base_att.reset();
  probe->flush_idle(netprism::agent::monotonic_now_ns(), true, [](const np_flowlet&) {});
  if (res.size() != arm_of.size()) throw std::runtime_error("the TCP stream failed");
  std::vector<std::vector<double>> gbps(kArms, std::vector<double>(static_cast<std::size_t>(rounds)));
  for (std::size_t ph = 0; ph < res.size(); ++ph)
    gbps[static_cast<std::size_t>(arm_of[ph])][ph / kArms] =
        8.0 * double(res[ph].bytes) / res[ph].seconds / 1e9;
  for (int r = 0; r < rounds; ++r)
    if (r < 5 || r == rounds - 1)
      std::printf("  round %d: without %.2f, probe %.2f, baseline %.2f Gbit/s%s\n", r + 1, gbps[0][r],
                  gbps[1][r], gbps[2][r], r == 4 && rounds > 6 ? "  ..." : "");
  // Per round, each arm against the same round's `without`: adjacent phases cancel drift.
  auto pairwise = [&](int a, int b) {
    std::vector<double> v;
    for (int r = 0; r < rounds; ++r) v.push_back(gbps[a][r] / gbps[b][r]);
    return median(v);
  };
  auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  std::printf("median Gbit/s: without %.2f, probe %.2f, baseline %.2f\n", median(gbps[0]), median(gbps[1]),
              median(gbps[2]));
  std::printf("throughput ratio probe / without: median pairwise %.3f, total bytes %.3f (target >= 0.97)\n",
              pairwise(1, 0), sum(gbps[1]) / sum(gbps[0]));
  std::printf("baseline / without: median pairwise %.3f, total %.3f; probe / baseline: %.3f, total %.3f\n",
              pairwise(2, 0), sum(gbps[2]) / sum(gbps[0]), pairwise(1, 2), sum(gbps[1]) / sum(gbps[2]));

  // The same question answered without the noise of a shared machine: the CPU time the probe itself used
  // (kernel bpf_stats, in rounds of their own) per second of stream. The stream is CPU-bound, so the
  // throughput it can cost is at most this share of the CPUs doing the work.
  int in = probe->program_fd("np_tc_ingress"), eg = probe->program_fd("np_tc_egress");
  uint64_t probe_ns = 0;
  double probed_seconds = 0;
  {
    BpfStats stats_on(true);
    std::string aerr;
    if (!probe->attach(net.host_if, AttachMode::kTc, aerr)) throw std::runtime_error(aerr);
    auto i0 = stats_of(in), e0 = stats_of(eg);
    auto b = netprism::bench::tcp_stream(net, 3.0, so);
    auto i1 = stats_of(in), e1 = stats_of(eg);
    probe->detach_all();
    probe_ns = (i1.ns - i0.ns) + (e1.ns - e0.ns);
    probed_seconds = b.seconds;
  }
  double share = double(probe_ns) / 1e9 / probed_seconds;
  auto c = probe->counters();
  std::printf("probe invocations %llu, headers pulled into the linear area %llu\n",
              (unsigned long long)c[NP_CNT_PACKETS], (unsigned long long)c[NP_CNT_PULLED]);
  std::printf(
      "probe CPU time (bpf_stats, 3 s of stream): %.2f ms per second of stream = %.2f %% of one CPU "
      "(throughput ratio >= %.3f if the stream were bound by one CPU)\n",
      1e3 * share, 100.0 * share, 1.0 - share);
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t repeat = 2'000'000;
  double seconds = 3;
  int rounds = 5;
  double tp_phase = 0.5;
  int tp_rounds = 200;
  std::string sections = "run,attached,throughput";
  std::string streams = "tcp,roce";
  bool pin = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--repeat")
      repeat = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    else if (k == "--seconds")
      seconds = std::strtod(argv[i + 1], nullptr);
    else if (k == "--tp-phase")
      tp_phase = std::strtod(argv[i + 1], nullptr);
    else if (k == "--tp-rounds")
      tp_rounds = std::atoi(argv[i + 1]);
    else if (k == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (k == "--sections")
      sections = argv[i + 1];
    else if (k == "--streams")
      streams = argv[i + 1];
    else if (k == "--pin")
      pin = std::atoi(argv[i + 1]) != 0;
    else {
      std::fprintf(
          stderr,
          "usage: probe_bench [--repeat N] [--seconds S] [--rounds R] [--sections "
          "run,attached,throughput] [--streams tcp,roce] [--tp-phase S] [--tp-rounds R] [--pin 0|1]\n");
      return 2;
    }
  }
  // Killed mid-run (Ctrl-C, a timeout, a closed pipe): still remove the namespace and restore bpf_stats.
  netprism::test::veth_signal::install();
  libbpf_set_print(quiet_existing_qdisc);
  if (geteuid() != 0) {
    std::fprintf(stderr, "probe_bench: needs root (loads BPF, creates namespaces)\n");
    return 1;
  }
  try {
    std::string err;
    auto probe = Probe::open(agent_like_options(), err);
    if (!probe) throw std::runtime_error(err);
    std::unique_ptr<baseline, BaselineDeleter> base(baseline::open_and_load());
    if (!base) throw std::runtime_error("cannot load the baseline program");
    auto want = [&](const char* s) { return sections.find(s) != std::string::npos; };
    if (want("run")) prog_test_run_section(*probe, *base, repeat, rounds);
    probe.reset();
    if (want("attached")) attached_section(*base, seconds, rounds, streams);
    if (want("throughput")) throughput_section(*base, tp_phase, tp_rounds, pin);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
