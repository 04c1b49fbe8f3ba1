// bench/ingest: ACK latency while a retention pass runs, against the same daemon and load without one, in
// the same run (issue 20: "retention off the commit path, ACK latency unaffected, measured as p99 around a
// retention pass").
//
// A data dir is prefilled through the store (segments, as the daemon writes them) with `old` small batches
// received two days ago, then copied. Each copy gets a real netprism-aggregator: the baseline with
// --retention-age-s 0 (keep everything), the other with --retention-age-s 86400, whose first pass (at start)
// deletes the whole prefill. Meanwhile `senders` agents each send a batch of `records` flowlets, wait for its
// ACK, and so on, for `seconds`; every ACK's latency is kept with its send time. The pass' span is read from
// the store (the smallest batch id passes the prefill's last one when it is done; ids are receive order), and
// the latencies of batches sent inside it are compared with the baseline's over the same seconds since start,
// in two ABBA rounds.
//   retention_ack_bench [old=300000] [senders=4] [records=64] [seconds=8]
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <unistd.h>

#include "store.hpp"
#include "test_sender.hpp"

using namespace netprism;
using namespace netprism::test;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kSec = 1000000000ull;

struct Params {
  int old = 300000;
  int senders = 4;
  int records = 64;
  int seconds = 8;
};

Batch small_batch(const std::string& node, uint64_t seq, int records, uint64_t t) {
  Batch b;
  b.node = node;
  b.epoch = 1;
  b.seq = seq;
  b.sent_ns = t;
  for (int r = 0; r < records; ++r)
    b.flowlets.push_back(make_flowlet(
        "10.213.9.1", "10.213.9." + std::to_string(2 + r % 60), static_cast<uint16_t>(40000 + r), 29500,
        t + static_cast<uint64_t>(r) * 1000, t + static_cast<uint64_t>(r) * 1000 + 500, 1500, 1, 0));
  return b;
}

void prefill(const std::string& dir, int n) {
  store::Store s(dir, store::Db::Mode::kReadWrite);
  s.enable_segments(64u << 20);
  const uint64_t received = unix_ns() - 2 * 86400 * kSec;
  for (int done = 0; done < n;) {
    store::Transaction tx(s.db());
    for (int i = 0; i < 5000 && done < n; ++i, ++done) {
      Batch b =
          small_batch("old" + std::to_string(done % 100), static_cast<uint64_t>(done / 100), 1, received);
      s.insert_batch(b, wire::encode(b), received);
    }
    s.commit(tx);
  }
}

int64_t min_batch_id(const std::string& dir) {
  store::Db db(store::Store::resolve(dir), store::Db::Mode::kReadOnly);
  auto q = db.prepare("SELECT coalesce(min(id), 0) FROM batches");
  return q.step() ? q.i64(0) : 0;
}

struct Sample {
  double sent_s;  // since the daemon was ready
  double ack_ms;
};

struct Run {
  std::vector<Sample> samples;
  double pass_from_s = -1, pass_to_s = -1;  // the retention pass' span, since ready (-1: not seen)
};

Run run(const std::string& dir, const Params& p, const std::string& age, int prefilled) {
  int lp = free_port(), qp = free_port();
  zmq::context_t ctx;
  AggregatorProcess agg(NETPRISM_AGGREGATOR_BIN, dir, lp, qp,
                        std::vector<std::string>{"--retention-age-s", age, "--analysis-interval-ms", "1000"});
  Run r;
  if (!agg.wait_ready(ctx)) return r;
  const auto t0 = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::mutex mu;
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  for (int s = 0; s < p.senders; ++s)
    ts.emplace_back([&, s] {
      TestSender snd(ctx, agg.listen());
      const std::string node = "live" + std::to_string(s);
      if (!snd.hello(node, 1)) return;
      std::vector<Sample> mine;
      for (uint64_t seq = 0; !stop; ++seq) {
        Batch b = small_batch(node, seq, p.records, unix_ns());
        const double at = since();
        auto a = snd.batch(b);
        if (!a) continue;
        mine.push_back({at, (since() - at) * 1000});
      }
      std::lock_guard lk(mu);
      r.samples.insert(r.samples.end(), mine.begin(), mine.end());
    });
  while (since() < p.seconds) {
    const int64_t m = min_batch_id(dir);
    if (m > 1 && r.pass_from_s < 0) r.pass_from_s = since();
    if (m > prefilled && r.pass_from_s >= 0 && r.pass_to_s < 0) r.pass_to_s = since();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  for (auto& t : ts) t.join();
  return r;
}

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

std::vector<double> within(const Run& r, double from, double to) {
  std::vector<double> out;
  for (const auto& s : r.samples)
    if (s.sent_s >= from && s.sent_s <= to) out.push_back(s.ack_ms);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Params p;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    int v = eq == std::string::npos ? 0 : std::atoi(a.c_str() + eq + 1);
    if (a.starts_with("old=")) p.old = v;
    if (a.starts_with("senders=")) p.senders = v;
    if (a.starts_with("records=")) p.records = v;
    if (a.starts_with("seconds=")) p.seconds = v;
  }
  const fs::path work = fs::temp_directory_path() / ("np_retbench_" + std::to_string(::getpid()));
  fs::create_directories(work);
  struct Cleanup {
    fs::path p;
    ~Cleanup() { fs::remove_all(p); }
  } cleanup{work};
  const auto t_fill = Clock::now();
  fs::create_directories(work / "a");  // a data dir (a path that is not one is taken for a database file)
  prefill((work / "a").string(), p.old);
  std::cout << fmt::format("prefilled {} batches received two days ago in {:.1f} s\n", p.old,
                           std::chrono::duration<double>(Clock::now() - t_fill).count());
  // ABBA: baseline, retention, retention, baseline, each on a fresh copy of the prefill; a pair's baseline
  // latencies are taken over its retention run's pass. The machine is shared: pairs even out drifts in load.
  std::vector<double> b, w;
  for (int round = 0; round < 2; ++round) {
    Run runs[2];
    for (int k = 0; k < 2; ++k) {
      const bool retention = (round + k) % 2 == 1;
      const fs::path copy = work / ("run" + std::to_string(round * 2 + k));
      fs::copy(work / "a", copy, fs::copy_options::recursive);
      runs[retention ? 1 : 0] = run(copy.string(), p, retention ? "86400" : "0", p.old);
      fs::remove_all(copy);
    }
    const Run& ret = runs[1];
    if (ret.pass_from_s < 0) {
      std::cout << "the retention pass was not seen (it ended before the first poll: raise old=)\n";
      return 1;
    }
    const double from = ret.pass_from_s, to = ret.pass_to_s < 0 ? p.seconds : ret.pass_to_s;
    auto rb = within(runs[0], from, to), rw = within(ret, from, to);
    std::cout << fmt::format(
        "round {}: pass {:.2f} .. {:.2f} s{}; baseline p50 {:.2f} p99 {:.2f} ms ({} ACKs), with retention "
        "p50 "
        "{:.2f} p99 {:.2f} ms ({} ACKs)\n",
        round, from, to, ret.pass_to_s < 0 ? " (still running at the end)" : "", pct(rb, 0.5), pct(rb, 0.99),
        rb.size(), pct(rw, 0.5), pct(rw, 0.99), rw.size());
    b.insert(b.end(), rb.begin(), rb.end());
    w.insert(w.end(), rw.begin(), rw.end());
  }
  const double b99 = pct(b, 0.99), w99 = pct(w, 0.99);
  std::cout << fmt::format(
      "{{\"ack_p50_ms_baseline\": {:.3f}, \"ack_p50_ms_retention\": {:.3f}, \"ack_p99_ms_baseline\": {:.3f}, "
      "\"ack_p99_ms_retention\": {:.3f}, \"p99_ratio\": {:.2f}}}\n",
      pct(b, 0.5), pct(w, 0.5), b99, w99, b99 > 0 ? w99 / b99 : 0.0);
  return 0;
}
