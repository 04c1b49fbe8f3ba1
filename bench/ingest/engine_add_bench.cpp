// bench/ingest: the live analysis engine's per-event cost (StreamingAnalysis::add) on the ingest bench's
// traffic shape (8 observers, each talking to 64 peers on 64 ports), which is what the daemon's analysis
// thread pays per stored flowlet (on top of its periodic passes). Prints CPU ns per event, for a first round
// (every flow new) and a second (every flow known). It uses only add(), so it builds against any tree's
// engine (g++ ... engine_add_bench.cpp OTHER/build/aggregator/libnetprism_analysis.a) for comparisons; the
// second pair of numbers adds each batch's events as one run (add(span): prefetches ahead), as the daemon
// does since session 5.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "incremental.hpp"

using netprism::analysis::StreamingAnalysis;

namespace {

constexpr int kObservers = 8, kPeers = 64, kPorts = 64, kBatch = 256;

std::vector<StreamingAnalysis::Event> make_events(StreamingAnalysis& sa, size_t n) {
  std::mt19937_64 rng(42);
  std::vector<uint32_t> obs, addr;
  for (int o = 0; o < kObservers; ++o) obs.push_back(sa.intern("bench" + std::to_string(o)));
  for (int a = 0; a < kPeers; ++a) addr.push_back(sa.intern("10.213.9." + std::to_string(a + 1)));
  std::vector<StreamingAnalysis::Event> ev(n);
  uint64_t t = 1'700'000'000'000'000'000ull;
  for (size_t i = 0; i < n; ++i) {
    auto& e = ev[i];
    int o = static_cast<int>(i / kBatch % kObservers);  // one observer per batch, as agents send
    e.observer = obs[o];
    e.src = addr[o];
    e.dst = addr[rng() % kPeers];
    e.src_port = static_cast<uint16_t>(40000 + rng() % kPorts);
    e.dst_port = 29500;
    e.proto = 6;
    e.dir = static_cast<int8_t>(rng() % 2);
    uint64_t pk = 1 + rng() % 2000;
    e.first_ns = t + i * 1000 + rng() % 100000;
    e.last_ns = e.first_ns + rng() % 5000000;
    e.packets = pk;
    e.bytes = pk * 1500;
    e.payload_bytes = pk * 1448;
  }
  return ev;
}

// CPU time of this thread (not wall time: the machine is shared), per event.
double thread_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}
template <class Add>
double ns_per_event(Add&& add, size_t n) {
  double t0 = thread_ns();
  add();
  return (thread_ns() - t0) / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = argc > 1 ? std::stoul(argv[1]) : 1'000'000;
  // Two rounds, both printed: the first creates the flows, the second finds them all.
  std::printf("{\"events\": %zu", n);
  auto add_all = [](StreamingAnalysis& sa, const std::vector<StreamingAnalysis::Event>& ev) {
    for (const auto& e : ev) sa.add(e);
  };
  StreamingAnalysis sa;
  auto ev = make_events(sa, n);
  double first = ns_per_event([&] { add_all(sa, ev); }, n);
  std::printf(", \"add_ns_per_event\": [%.1f, %.1f]", first, ns_per_event([&] { add_all(sa, ev); }, n));
  // The daemon's way: each stored batch's events as one run (add(span), prefetching ahead).
  auto add_runs = [](StreamingAnalysis& s, const std::vector<StreamingAnalysis::Event>& e) {
    for (size_t i = 0; i < e.size(); i += kBatch)
      s.add(std::span<const StreamingAnalysis::Event>(e.data() + i, std::min<size_t>(kBatch, e.size() - i)));
  };
  StreamingAnalysis sb;
  auto ev2 = make_events(sb, n);
  double first_runs = ns_per_event([&] { add_runs(sb, ev2); }, n);
  std::printf(", \"add_runs_ns_per_event\": [%.1f, %.1f]", first_runs,
              ns_per_event([&] { add_runs(sb, ev2); }, n));
  std::printf("}\n");
  return 0;
}
