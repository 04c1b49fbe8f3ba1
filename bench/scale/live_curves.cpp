// Cost growth curves of the daemon's live analysis (issue 20): pass time and RSS of
// analysis::StreamingAnalysis against job length (100 .. 100,000 iterations), cluster size (128 .. 2,048
// nodes) and number of jobs (1 .. 400). Traffic: sim_model jobs (sender-side events, one per transfer), a
// simulated stretch of each job tiled in time so that 100,000 iterations need no 100,000-iteration
// simulation. One pass per second of data, as the daemon does (analysis_interval_ms 1000); a pass' cost
// includes adding its new events.
//
//   live_curves [length|cluster|jobs|all] [--quick]
//
// Each table row: the mean pass time over the last passes measured at that point, the same per thousand new
// events (flat when a pass costs in proportion to new data), the transfers the pass re-analysed and the
// process RSS. The slope line under each table is a least-squares fit of pass time against the row variable.
#include <sys/resource.h>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "incremental.hpp"
#include "proc_rss.hpp"
#include "sim_model.hpp"

using namespace netprism;

namespace {

using bench::rss_mb;

// CPU time of this thread: a pass' cost without the other processes of a shared machine.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// One job's traffic, endlessly: a simulated stretch of `base` iterations repeated every `span` ns.
struct TiledJob {
  std::vector<sim::Transfer> tile;  // sorted by end_ns, global node indices
  uint64_t span = 0;
  uint64_t copy = 0;  // next tile to emit
  size_t next = 0;    // next transfer of the current tile
  int iterations_per_tile = 0;
};

TiledJob make_job(sim::JobSpec j, int first_node, int base, uint64_t seed, uint64_t offset_ns) {
  sim::ClusterSpec c;
  c.nodes = j.dp * j.pp;
  c.seed = seed;
  c.t0_ns = 1'000'000'000ull + offset_ns;
  j.iterations = base;
  c.jobs.push_back(j);
  auto s = sim::simulate(c);
  TiledJob t;
  const auto& its = s.truth["jobs"][0]["iterations"];
  t.iterations_per_tile = static_cast<int>(its.size());
  t.span = its.back()["end_ns"].get<uint64_t>() - its.front()["start_ns"].get<uint64_t>();
  t.tile = std::move(s.transfers);
  for (auto& x : t.tile) x.src += first_node, x.dst += first_node;
  std::sort(t.tile.begin(), t.tile.end(), [](auto& a, auto& b) { return a.end_ns < b.end_ns; });
  return t;
}

class Bench {
 public:
  explicit Bench(int nodes) {
    std::map<std::string, std::string> m;
    for (int i = 0; i < nodes; ++i) {
      m[sim::node_addr(i)] = sim::node_name(i);
      addr_.push_back(sa_.intern(sim::node_addr(i)));
      name_.push_back(sa_.intern(sim::node_name(i)));
    }
    sa_.set_addr_nodes(m);
  }
  std::vector<TiledJob> jobs;
  // Adds one second of data and runs a pass; returns its wall time in ms.
  double step() {
    t_ += 1'000'000'000ull;
    const double t0 = cpu_ms();
    events_.clear();
    for (auto& j : jobs)
      for (;;) {
        if (j.next == j.tile.size()) j.next = 0, ++j.copy;
        const auto& x = j.tile[j.next];
        uint64_t shift = j.copy * j.span;
        if (x.end_ns + shift > t_) break;
        events_.push_back(event(x, shift));
        ++j.next;
      }
    std::sort(events_.begin(), events_.end(), [](auto& a, auto& b) { return a.last_ns < b.last_ns; });
    sa_.add(events_);
    last_ = sa_.pass(t_);
    new_events += events_.size();
    return cpu_ms() - t0;
  }
  uint64_t new_events = 0;
  const analysis::StreamingAnalysis& engine() const { return sa_; }
  const analysis::Result& result() const { return last_; }

 private:
  analysis::StreamingAnalysis::Event event(const sim::Transfer& x, uint64_t shift) {
    analysis::StreamingAnalysis::Event e;
    e.observer = name_[x.src];
    e.src = addr_[x.src];
    e.dst = addr_[x.dst];
    e.src_port = sim::src_port(x.src, x.dst);
    e.dst_port = 4791;
    e.proto = 3;  // RoCE
    e.qpn = x.qpn;
    e.dir = 1;  // egress
    e.first_ns = x.start_ns + shift;
    e.last_ns = x.end_ns + shift;
    e.bytes = e.payload_bytes = x.bytes;
    e.packets = (x.bytes + 4095) / 4096;
    return e;
  }
  analysis::StreamingAnalysis sa_;
  std::vector<uint32_t> addr_, name_;
  std::vector<analysis::StreamingAnalysis::Event> events_;
  analysis::Result last_;
  uint64_t t_ = 1'000'000'000ull;
};

struct Row {
  double x, pass_ms, us_per_kevent, tail_xfers;
  long rss;
};

// Mean over `n` passes: pass ms, and ms per thousand new events.
Row measure(Bench& b, double x, int n) {
  double total = 0, tail = 0;
  uint64_t ev0 = b.new_events;
  for (int i = 0; i < n; ++i) {
    total += b.step();
    tail += static_cast<double>(b.engine().stats().tail_xfers);
  }
  double ev = static_cast<double>(b.new_events - ev0);
  return {x, total / n, ev > 0 ? total / (ev / 1000.0) * 1000.0 : 0, tail / n, rss_mb()};
}

void print(const char* title, const char* xname, const std::vector<Row>& rows) {
  std::printf(
      "\n%s\n| %s | pass CPU ms | us per 1k new events | tail transfers | RSS MB |\n|---|---|---|---|---|\n",
      title, xname);
  for (const auto& r : rows)
    std::printf("| %.0f | %.2f | %.1f | %.0f | %ld |\n", r.x, r.pass_ms, r.us_per_kevent, r.tail_xfers,
                r.rss);
  // Least squares of pass ms against x.
  double n = static_cast<double>(rows.size()), sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& r : rows) sx += r.x, sy += r.pass_ms, sxx += r.x * r.x, sxy += r.x * r.pass_ms;
  double slope = (n * sxy - sx * sy) / std::max(1e-9, n * sxx - sx * sx);
  std::printf("slope: %.6f ms per %s (pass ms from %.2f to %.2f over x %.0f..%.0f)\n", slope, xname,
              rows.front().pass_ms, rows.back().pass_ms, rows.front().x, rows.back().x);
  std::fflush(stdout);
}

sim::JobSpec shape(int dp, int pp, double fwd_ms) {
  sim::JobSpec j;
  j.dp = dp;
  j.pp = pp;
  j.micro_batches = 4;
  j.fwd_ms = fwd_ms;
  j.optimizer_ms = 10;
  j.grad_mb = 64;
  return j;
}

void length_curve(bool quick) {
  // One 8-node job (DP4 x PP2) with ~40 ms steps: 100,000 iterations are ~70 minutes of its traffic.
  Bench b(8);
  b.jobs.push_back(make_job(shape(4, 2, 1.0), 0, 200, 7, 0));
  std::vector<Row> rows;
  const long top = quick ? 10'000 : 100'000;
  for (long target : {100L, 1'000L, 10'000L, 100'000L}) {
    if (target > top) break;
    auto its = [&] {
      return b.result().jobs.empty() ? 0 : static_cast<long>(b.result().jobs[0].iterations.size());
    };
    while (its() < target * 4 / 5) b.step();
    Row r = measure(b, 0, 10);  // ten passes of ~25 iterations each
    r.x = static_cast<double>(its());
    rows.push_back(r);
  }
  print("Live pass vs job length (one DP4 x PP2 job, 8 nodes)", "iterations", rows);
}

void cluster_curve(bool quick) {
  // Four jobs sharing the cluster (PP 8, 4, 2, 1; the scale preset's shapes), 60 s of data before measuring.
  std::vector<Row> rows;
  for (int nodes : {128, 256, 512, 1024, 2048}) {
    if (quick && nodes > 512) break;
    Bench b(nodes);
    const int per = nodes / 4, pps[4] = {8, 4, 2, 1};
    for (int k = 0; k < 4; ++k)
      b.jobs.push_back(make_job(shape(per / pps[k], pps[k], 20), k * per, 20, 11 + k, 37'000'000ull * k));
    for (int i = 0; i < 60; ++i) b.step();
    rows.push_back(measure(b, nodes, 20));
  }
  print("Live pass vs cluster size (four jobs sharing it)", "nodes", rows);
}

void jobs_curve(bool quick) {
  // K jobs of 4 nodes (DP2 x PP2, ~0.3 s steps), 60 s of data before measuring.
  std::vector<Row> rows;
  for (int k : {1, 10, 50, 100, 200, 400}) {
    if (quick && k > 100) break;
    Bench b(4 * k);
    for (int i = 0; i < k; ++i)
      b.jobs.push_back(make_job(shape(2, 2, 20), 4 * i, 40, 100 + static_cast<uint64_t>(i),
                                13'000'000ull * static_cast<uint64_t>(i % 50)));
    for (int i = 0; i < 60; ++i) b.step();
    rows.push_back(measure(b, k, 20));
  }
  print("Live pass vs number of jobs (4-node jobs)", "jobs", rows);
}

}  // namespace

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "all";
  bool quick = false;
  for (int i = 1; i < argc; ++i) quick = quick || std::strcmp(argv[i], "--quick") == 0;
  if (what == "length" || what == "all") length_curve(quick);
  if (what == "cluster" || what == "all") cluster_curve(quick);
  if (what == "jobs" || what == "all") jobs_curve(quick);
  return 0;
}
