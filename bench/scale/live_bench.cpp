// Cost of the daemon's live analysis per pass (analysis::StreamingAnalysis), one pass per second of traffic,
// against the baseline of the same run: analyze() over everything seen so far (what the daemon did before
// the streaming engine: a full re-analysis of its window every pass). Shows that a pass costs in proportion
// to new data plus a bounded tail, and that the streaming result equals the offline one.
//
//   live_bench periodic [--nodes 64 --dp 8 --pp 8 --iters 300]   a simulated training job (sim_model)
//   live_bench load [--nodes 1000 --rate 200 --seconds 60 --jitter-ms 0]  the ingest load test's traffic
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "feed.hpp"
#include "incremental.hpp"
#include "netprism/addr.hpp"
#include "proc_rss.hpp"
#include "sim_model.hpp"

using namespace netprism;
using Clock = std::chrono::steady_clock;

namespace {

using bench::rss_mb;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

analysis::FlowEvent event(int src, int dst, uint32_t qpn, uint64_t t0, uint64_t t1, uint64_t bytes) {
  analysis::FlowEvent e;
  e.observer = sim::node_name(src);
  e.src = sim::node_addr(src);
  e.dst = sim::node_addr(dst);
  e.src_port = sim::src_port(src, dst);
  e.dst_port = 4791;
  e.proto = 3;  // RoCE
  e.qpn = qpn;
  e.dir = 1;  // egress
  e.first_ns = t0;
  e.last_ns = t1;
  e.bytes = bytes;
  e.payload_bytes = bytes;
  e.packets = (bytes + 4095) / 4096;
  return e;
}

int arg(int argc, char** argv, const char* name, int def) {
  for (int i = 2; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return std::stoi(argv[i + 1]);
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "periodic";
  int nodes = arg(argc, argv, "--nodes", mode == "load" ? 1000 : 64);
  analysis::Input in;
  for (int i = 0; i < nodes; ++i) in.addr_node[sim::node_addr(i)] = sim::node_name(i);
  if (mode == "load") {
    int rate = arg(argc, argv, "--rate", 200), seconds = arg(argc, argv, "--seconds", 60);
    int per_tick = std::max(1, rate / 10);
    // --jitter-ms J: each tick late by a random 0..J ms (a CPU-starved sender), which makes the traffic
    // aperiodic for the timeline.
    int jitter = arg(argc, argv, "--jitter-ms", 0);
    std::mt19937_64 rng(1);
    uint64_t t = 1'000'000'000;
    for (int tick = 0; tick < seconds * 10;
         ++tick, t += 100'000'000 + (jitter ? rng() % (static_cast<uint64_t>(jitter) * 1'000'000) : 0))
      for (int i = 0; i < nodes; ++i)
        for (int k = 0; k < per_tick; ++k)
          in.events.push_back(
              event(i, (i + 1 + k) % nodes, static_cast<uint32_t>(k), t - 90'000'000, t, 65536));
  } else {
    sim::ClusterSpec spec;
    spec.nodes = nodes;
    sim::JobSpec j;
    j.dp = arg(argc, argv, "--dp", 8);
    j.pp = arg(argc, argv, "--pp", 8);
    j.iterations = arg(argc, argv, "--iters", 300);
    spec.jobs.push_back(j);
    auto s = sim::simulate(spec);
    for (const auto& x : s.transfers)
      in.events.push_back(event(x.src, x.dst, x.qpn, x.start_ns, x.end_ns, x.bytes));
  }
  std::stable_sort(in.events.begin(), in.events.end(),
                   [](const auto& a, const auto& b) { return a.last_ns < b.last_ns; });
  std::printf("%s: %zu events over %.0f s of traffic, %d nodes\n", mode.c_str(), in.events.size(),
              (in.events.back().last_ns - in.events.front().first_ns) / 1e9, nodes);

  analysis::StreamingAnalysis sa;
  sa.set_addr_nodes(in.addr_node);
  uint64_t t = in.events.front().last_ns + 1'000'000'000;
  size_t i = 0;
  double total_ms = 0, last_ms = 0, baseline_ms = 0;
  int pass = 0;
  std::printf("%6s %10s %12s %12s %12s %8s %s\n", "data_s", "new_events", "pass_ms", "tail_xfers",
              "kept_xfers", "rss_mb", "baseline: analyze() over all so far, ms");
  analysis::Result live;
  while (i < in.events.size()) {
    size_t before = i;
    auto t0 = Clock::now();
    while (i < in.events.size() && in.events[i].last_ns <= t) analysis::add_event(sa, in.events[i++]);
    live = sa.pass(t);
    last_ms = ms_since(t0);
    total_ms += last_ms;
    ++pass;
    if (pass % 10 == 0 || i == in.events.size()) {
      // Baseline in the same run: what a full re-analysis of everything so far costs now.
      analysis::Input so_far;
      so_far.addr_node = in.addr_node;
      so_far.events.assign(in.events.begin(), in.events.begin() + static_cast<long>(i));
      so_far.now_ns = t;
      auto b0 = Clock::now();
      auto off = analysis::analyze(so_far);
      baseline_ms = ms_since(b0);
      std::printf("%6d %10zu %12.1f %12llu %12llu %8ld %.1f\n", pass, i - before, last_ms,
                  static_cast<unsigned long long>(sa.stats().tail_xfers),
                  static_cast<unsigned long long>(sa.stats().xfers), rss_mb(), baseline_ms);
      std::fflush(stdout);
    }
    t += 1'000'000'000;
  }
  in.now_ns = t - 1'000'000'000;
  auto off = analysis::analyze(in);
  size_t same = 0, its = 0;
  for (const auto& j : live.jobs)
    for (const auto& o : off.jobs)
      if (o.id == j.id) {
        its += o.iterations.size();
        for (size_t k = 0; k < std::min(j.iterations.size(), o.iterations.size()); ++k)
          same += j.iterations[k].start_ns == o.iterations[k].start_ns &&
                  j.iterations[k].end_ns == o.iterations[k].end_ns;
        std::printf("job %s: live %zu iterations dp%d pp%d, offline %zu iterations dp%d pp%d\n", j.id.c_str(),
                    j.iterations.size(), j.parallelism.dp, j.parallelism.pp, o.iterations.size(),
                    o.parallelism.dp, o.parallelism.pp);
      }
  for (const auto& j : live.jobs)
    std::printf("live job %s: %zu iterations\n", j.id.c_str(), j.iterations.size());
  for (const auto& o : off.jobs)
    std::printf("offline job %s: %zu iterations\n", o.id.c_str(), o.iterations.size());
  std::printf(
      "passes %d, mean pass %.1f ms, last pass %.1f ms (baseline full re-analysis %.1f ms: x%.1f); "
      "jobs live %zu offline %zu; iterations identical %zu/%zu; restitched %llu, structure runs %llu, "
      "dropped %llu\n",
      pass, total_ms / pass, last_ms, baseline_ms, baseline_ms / std::max(last_ms, 1e-3), live.jobs.size(),
      off.jobs.size(), same, its, static_cast<unsigned long long>(sa.stats().restitched),
      static_cast<unsigned long long>(sa.stats().structure_runs),
      static_cast<unsigned long long>(sa.stats().dropped_xfers + sa.stats().dropped_events));
  return 0;
}
