// bench/ingest: durable ingest records/s from N concurrent senders on loopback, against raw ZeroMQ moving
// the same bytes in the same run, and bytes stored per record.
//
// Both runs send the same pre-encoded batch messages from N DEALER threads, each keeping up to `window`
// batches in flight and waiting for one reply per batch:
//   baseline: an in-process ROUTER that receives each message and answers a fixed 20-byte reply (no decode,
//             no storage) -- what ZeroMQ alone costs to move these bytes with the same request/ACK pattern;
//   durable:  the real netprism-aggregator (separate process): decode with limits, zstd, SQLite WAL commit
//             with fsync (synchronous=FULL), then ACK.
// Records are realistic flowlets: a 64-node cluster's addresses, training ports, increasing times.
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <fstream>
#include <random>
#include <sstream>

#include <sys/resource.h>
#include <unistd.h>

#include "test_sender.hpp"

using namespace netprism;
using namespace netprism::test;
using Clock = std::chrono::steady_clock;

namespace {

struct Params {
  int senders = 8;
  // Per sender. 1200 (9,600 batches, 2.5 M records): the durable run lasts ~0.8 s, so it measures ingest
  // rather than the daemon's first moments (a fresh store and WAL, page cache and heaps filling up for the
  // first time, the pipeline filling) that weighed heavily in the ~0.3 s run of 400.
  int batches = 1200;
  int records = 256;   // flowlets per batch
  int window = 16;     // batches in flight per sender
  int skip_raw = 0;    // profiling aid: only the durable run
  int zstd_level = 0;  // passed to the aggregator when set; 0: the aggregator's default
  // Alternating raw/durable pairs (ABBA order), medians reported: one pair lasts well under a second, and
  // on a shared 2-core machine single pairs read anywhere from 0.3 to 0.6.
  int rounds = 7;
  // 1: every round also runs the durable side with CURVE (keys made per round, one agent key per sender,
  // the ZAP handler admitting them) and reports its cost against the plain durable run of the same round.
  int curve = 0;
};

std::vector<std::vector<std::string>> make_batches(const Params& p, uint64_t epoch) {
  std::mt19937_64 rng(42);
  std::vector<std::vector<std::string>> out(p.senders);
  uint64_t t = unix_ns() - 3600ull * 1000000000ull;
  for (int s = 0; s < p.senders; ++s) {
    std::string self = "10.213.9." + std::to_string(s + 1);
    for (int b = 0; b < p.batches; ++b) {
      Batch batch;
      batch.node = "bench" + std::to_string(s);
      batch.epoch = epoch;
      batch.seq = static_cast<uint64_t>(b);
      batch.sent_ns = unix_ns();
      for (int r = 0; r < p.records; ++r) {
        std::string peer = "10.213.9." + std::to_string(rng() % 64 + 1);
        uint64_t first = t + static_cast<uint64_t>(b) * 100000000ull + rng() % 100000000ull;
        uint64_t pk = 1 + rng() % 2000;
        batch.flowlets.push_back(make_flowlet(self, peer, static_cast<uint16_t>(40000 + rng() % 64), 29500,
                                              first, first + rng() % 5000000, pk * 1500, pk,
                                              static_cast<uint8_t>(rng() % 2)));
      }
      batch.counters = {{"captured", static_cast<uint64_t>(b) * p.records},
                        {"shipped", static_cast<uint64_t>(b)}};
      out[s].push_back(wire::encode(batch));
    }
  }
  return out;
}

// CPU seconds (user + system) in a /proc stat line: fields 14 and 15, counted after the command name, which
// may hold spaces and parentheses. -1 if the line is not one.
double stat_cpu_s(const std::string& line) {
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return -1;
  std::istringstream in(line.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && in >> field; ++i)
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// CPU seconds one thread (/proc/PID/task/TID) has used so far: its schedstat (nanoseconds on the CPU) where
// the kernel keeps it, else its stat line (clock ticks: 10 ms, ~12 ns per record of a default run, too
// coarse to tell threads apart). -1 if unreadable.
double task_cpu_s(const std::filesystem::path& task) {
  std::ifstream sched(task / "schedstat");
  double ns = 0;
  if (sched >> ns && ns > 0) return ns / 1e9;
  std::ifstream f(task / "stat");
  std::string line;
  return std::getline(f, line) ? stat_cpu_s(line) : -1;
}

// CPU seconds per thread name of a process (its threads are named: np-ingest, np-analysis, ...), summed
// over threads of the same name; for the breakdown of the aggregator's CPU per record.
std::map<std::string, double> thread_cpu_s(pid_t pid) {
  std::map<std::string, double> out;
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream f(t.path() / "comm");
    std::string name;
    double cpu = task_cpu_s(t.path());
    if (!std::getline(f, name) || cpu < 0) continue;
    out[name] += cpu;
  }
  return out;
}

// CPU seconds a process has used so far: the sum over its threads (none of the aggregator's ends while
// timed).
double proc_cpu_s(pid_t pid) {
  double sum = 0;
  for (const auto& [name, cpu] : thread_cpu_s(pid)) sum += cpu;
  return sum;
}

// CPU seconds this (bench) process has used so far: the senders, and in the raw run the ROUTER too.
double self_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

// Sends every message of one sender with a bounded window, waiting for one reply each. Returns replies seen.
uint64_t pump(zmq::socket_t& sock, const std::vector<std::string>& msgs, int window,
              const std::function<bool(const zmq::message_t&)>& ok) {
  std::size_t next = 0;
  uint64_t acked = 0, in_flight = 0, good = 0;
  while (acked < msgs.size()) {
    while (in_flight < static_cast<uint64_t>(window) && next < msgs.size()) {
      (void)sock.send(zmq::buffer(msgs[next++]), zmq::send_flags::none);
      in_flight++;
    }
    zmq::message_t m;
    if (!sock.recv(m)) break;  // rcvtimeo: something is wrong, stop
    acked++;
    in_flight--;
    if (ok(m)) good++;
  }
  return good;
}

struct Raw {
  double secs = 0;
  double cpu_s = 0;  // of the whole bench process while timed (senders + ROUTER + ZeroMQ I/O threads)
};

Raw run_raw(const Params& p, const std::vector<std::vector<std::string>>& msgs) {
  zmq::context_t ctx(2);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  int port = free_port();
  std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
  router.bind(ep);
  std::atomic<bool> stop{false};
  std::thread server([&] {
    const std::string reply(20, 'a');
    zmq::pollitem_t it[] = {{router.handle(), 0, ZMQ_POLLIN, 0}};
    while (!stop) {
      if (zmq::poll(it, 1, std::chrono::milliseconds(50)) <= 0) continue;
      while (true) {
        zmq::message_t id, body;
        if (!router.recv(id, zmq::recv_flags::dontwait)) break;
        (void)router.recv(body);
        (void)router.send(id, zmq::send_flags::sndmore);
        (void)router.send(zmq::buffer(reply), zmq::send_flags::none);
      }
    }
  });
  std::vector<std::unique_ptr<zmq::socket_t>> socks;
  for (int s = 0; s < p.senders; ++s) {
    socks.push_back(std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer));
    socks.back()->set(zmq::sockopt::linger, 0);
    socks.back()->set(zmq::sockopt::rcvtimeo, 30000);
    socks.back()->connect(ep);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // connections up before timing
  Raw r;
  const double cpu0 = self_cpu_s();
  auto t0 = Clock::now();
  std::vector<std::thread> th;
  for (int s = 0; s < p.senders; ++s)
    th.emplace_back(
        [&, s] { pump(*socks[s], msgs[s], p.window, [](const zmq::message_t&) { return true; }); });
  for (auto& t : th) t.join();
  r.secs = std::chrono::duration<double>(Clock::now() - t0).count();
  r.cpu_s = self_cpu_s() - cpu0;
  stop = true;
  server.join();
  return r;
}

struct Durable {
  double secs = 0;
  uint64_t stored_ok = 0;
  uint64_t blob_bytes = 0;
  uint64_t file_bytes = 0;
  double aggregator_cpu_s = 0;                            // while timed
  double senders_cpu_s = 0;                               // this process while timed
  std::map<std::string, double> aggregator_thread_cpu_s;  // while timed, by thread name
};

// CURVE keys for a run: the server's, an admin client's, one agent key per sender (bench<N>).
std::vector<std::string> make_keys(const std::string& dir, int senders) {
  auto gen = [&](const std::string& name) {
    if (auto e = keys::generate(dir + "/" + name); !e.empty()) throw std::runtime_error(e);
  };
  gen("server");
  gen("admin");
  std::ofstream agents(dir + "/agents"), clients(dir + "/clients");
  std::string err;
  for (int s = 0; s < senders; ++s) {
    gen("bench" + std::to_string(s));
    agents << "bench" << s << " " << *keys::read_public(dir + "/bench" + std::to_string(s) + ".pub", err)
           << "\n";
  }
  clients << "admin " << *keys::read_public(dir + "/admin.pub", err) << "\n";
  return {"--server-key", dir + "/server.key", "--agents", dir + "/agents", "--clients", dir + "/clients"};
}

keys::ClientCurve client_keys(const std::string& dir, const std::string& name) {
  keys::ClientCurve c;
  if (auto e = keys::load_client(dir + "/" + name + ".key", dir + "/server.pub", c); !e.empty())
    throw std::runtime_error(e);
  return c;
}

Durable run_durable(const Params& p, const std::vector<std::vector<std::string>>& msgs, uint64_t epoch,
                    const std::string& dir, bool curve = false) {
  Durable d;
  zmq::context_t ctx(2);
  // NP_BENCH_AGGREGATOR: another build of the daemon (A/B comparisons of two builds under the same load).
  const char* bin = std::getenv("NP_BENCH_AGGREGATOR");
  std::vector<std::string> extra;
  if (p.zstd_level != 0) extra = {"--zstd-level", std::to_string(p.zstd_level)};
  std::filesystem::create_directories(dir);
  if (curve)
    for (auto& a : make_keys(dir, p.senders)) extra.push_back(a);
  AggregatorProcess proc(bin && *bin ? bin : NETPRISM_AGGREGATOR_BIN, dir, free_port(), free_port(), extra);
  if (curve) proc.set_client(client_keys(dir, "admin"));
  if (!proc.wait_ready(ctx)) throw std::runtime_error("aggregator did not start");
  std::vector<std::unique_ptr<TestSender>> senders;
  for (int s = 0; s < p.senders; ++s) {
    senders.push_back(std::make_unique<TestSender>(
        ctx, proc.listen(), curve ? client_keys(dir, "bench" + std::to_string(s)) : keys::ClientCurve{}));
    senders.back()->socket().set(zmq::sockopt::rcvtimeo, 30000);
    auto a = senders.back()->hello("bench" + std::to_string(s), epoch, {"10.213.9." + std::to_string(s + 1)});
    if (!a || a->status != AckStatus::kHelloOk) throw std::runtime_error("HELLO not accepted");
  }
  std::atomic<uint64_t> ok{0};
  const double agg0 = proc_cpu_s(proc.pid()), self0 = self_cpu_s();
  const auto threads0 = thread_cpu_s(proc.pid());
  auto t0 = Clock::now();
  std::vector<std::thread> th;
  for (int s = 0; s < p.senders; ++s)
    th.emplace_back([&, s] {
      ok += pump(senders[s]->socket(), msgs[s], p.window, [](const zmq::message_t& m) {
        auto r = wire::decode(m.to_string_view());
        return r && r.message->type == MsgType::kAck &&
               std::get<Ack>(r.message->body).status == AckStatus::kOk;
      });
    });
  for (auto& t : th) t.join();
  d.secs = std::chrono::duration<double>(Clock::now() - t0).count();
  d.aggregator_cpu_s = proc_cpu_s(proc.pid()) - agg0;
  for (auto& [name, cpu] : thread_cpu_s(proc.pid())) {
    auto it = threads0.find(name);
    d.aggregator_thread_cpu_s[name] = cpu - (it == threads0.end() ? 0.0 : it->second);
  }
  d.senders_cpu_s = self_cpu_s() - self0;
  d.stored_ok = ok;
  proc.stop(SIGTERM);
  sqlite3* db = nullptr;
  std::string path = dir + "/netprism.db";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    // A batch's bytes: in a segment file (seg_len) or, for a daemon from before segments (the A/B
    // variable), inline.
    if (sqlite3_prepare_v2(db, "SELECT coalesce(sum(coalesce(seg_len,length(data))),0) FROM batches", -1, &st,
                           nullptr) != SQLITE_OK) {
      sqlite3_finalize(st);
      sqlite3_prepare_v2(db, "SELECT coalesce(sum(length(data)),0) FROM batches", -1, &st, nullptr);
    }
    if (sqlite3_step(st) == SQLITE_ROW) d.blob_bytes = static_cast<uint64_t>(sqlite3_column_int64(st, 0));
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  for (const char* suffix : {"", "-wal"}) {
    std::error_code ec;
    auto n = std::filesystem::file_size(path + suffix, ec);
    if (!ec) d.file_bytes += n;
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path + "-segments", ec))
    if (e.is_regular_file(ec)) d.file_bytes += e.file_size(ec);
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  Params p;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int v = std::stoi(argv[i + 1]);
    if (k == "--senders")
      p.senders = v;
    else if (k == "--batches")
      p.batches = v;
    else if (k == "--records")
      p.records = v;
    else if (k == "--window")
      p.window = v;
    else if (k == "--skip-raw")
      p.skip_raw = v;
    else if (k == "--zstd-level")
      p.zstd_level = v;
    else if (k == "--rounds")
      p.rounds = std::max(1, v);
    else if (k == "--curve")
      p.curve = v;
    else {
      std::cerr << "usage: ingest_bench [--senders N] [--batches PER_SENDER] [--records PER_BATCH] [--window "
                   "N] [--zstd-level L] [--rounds R] [--skip-raw 1] [--curve 1]\n";
      return 2;
    }
  }
  const uint64_t epoch = unix_ns();
  auto msgs = make_batches(p, epoch);
  uint64_t wire_bytes = 0;
  for (auto& s : msgs)
    for (auto& m : s) wire_bytes += m.size();
  const double records = static_cast<double>(p.senders) * p.batches * p.records;
  std::vector<Raw> raws;
  std::vector<Durable> durs, curves;
  for (int r = 0; r < p.rounds; ++r) {
    auto dir = (std::filesystem::temp_directory_path() /
                ("np_ingest_bench_" + std::to_string(::getpid()) + "_" + std::to_string(r)))
                   .string();
    std::filesystem::create_directories(dir);
    auto raw_once = [&] { raws.push_back(p.skip_raw ? Raw{1, 0} : run_raw(p, msgs)); };
    if (r % 4 == 0 || r % 4 == 3) {
      raw_once();
      durs.push_back(run_durable(p, msgs, epoch, dir));
    } else {
      durs.push_back(run_durable(p, msgs, epoch, dir));
      raw_once();
    }
    std::filesystem::remove_all(dir);
    if (p.curve) {  // the same durable run with CURVE, right after (the plain one is its baseline)
      curves.push_back(run_durable(p, msgs, epoch, dir, true));
      std::filesystem::remove_all(dir);
      std::cerr << "round " << r + 1 << ": curve cost " << curves.back().secs / durs.back().secs << "\n";
    }
    std::cerr << "round " << r + 1 << ": ratio " << raws.back().secs / durs.back().secs << "\n";
  }
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : (v[(v.size() - 1) / 2] + v[v.size() / 2]) / 2;
  };
  std::vector<double> ratios, raw_secs, dur_secs, raw_cpu, snd_cpu, agg_cpu;
  for (std::size_t r = 0; r < durs.size(); ++r) {
    ratios.push_back(raws[r].secs / durs[r].secs);
    raw_secs.push_back(raws[r].secs);
    dur_secs.push_back(durs[r].secs);
    raw_cpu.push_back(raws[r].cpu_s);
    snd_cpu.push_back(durs[r].senders_cpu_s);
    agg_cpu.push_back(durs[r].aggregator_cpu_s);
  }
  // Medians per quantity; stored bytes from the last round (identical input every round); batches acked as
  // stored: the fewest of any round, so a short round fails the run.
  const double raw = median_of(raw_secs);
  Durable d = durs.back();
  d.secs = median_of(dur_secs);
  d.senders_cpu_s = median_of(snd_cpu);
  d.aggregator_cpu_s = median_of(agg_cpu);
  for (auto& [name, cpu] : d.aggregator_thread_cpu_s) {
    std::vector<double> v;
    for (const auto& x : durs)
      v.push_back(x.aggregator_thread_cpu_s.count(name) ? x.aggregator_thread_cpu_s.at(name) : 0.0);
    cpu = median_of(v);
  }
  Raw rr{raw, median_of(raw_cpu)};
  for (const auto& x : durs) d.stored_ok = std::min(d.stored_ok, x.stored_ok);

  double raw_rps = records / raw, dur_rps = records / d.secs;
  const nlohmann::json level =
      p.zstd_level == 0 ? nlohmann::json("aggregator default") : nlohmann::json(p.zstd_level);
  nlohmann::json out = {
      {"senders", p.senders},
      {"batches_per_sender", p.batches},
      {"records_per_batch", p.records},
      {"window", p.window},
      {"zstd_level", level},
      {"wire_bytes_per_record", wire_bytes / records},
      {"raw_zmq_records_per_s", raw_rps},
      {"raw_zmq_MB_per_s", wire_bytes / raw / 1e6},
      {"durable_records_per_s", dur_rps},
      {"durable_MB_per_s", wire_bytes / d.secs / 1e6},
      {"ratio_durable_vs_raw", median_of(ratios)},  // median of the rounds' ratios
      {"ratio_rounds", ratios},
      {"ratio_of_median_rates", dur_rps / raw_rps},
      {"batches_acked_ok", d.stored_ok},
      {"stored_bytes_per_record", d.blob_bytes / records},
      // CPU per record (ns) while timed: where the time goes on a shared machine
      {"raw_cpu_ns_per_record", rr.cpu_s / records * 1e9},
      {"durable_senders_cpu_ns_per_record", d.senders_cpu_s / records * 1e9},
      {"durable_aggregator_cpu_ns_per_record", d.aggregator_cpu_s / records * 1e9},
      {"db_file_bytes_per_record", d.file_bytes / records}};  // database, WAL and segment files
  // Where the aggregator's CPU per record went (ns, by thread name); the threads' sum can differ slightly
  // from the process figure (threads that ended while timed, clock-tick rounding).
  nlohmann::json by_thread = nlohmann::json::object();
  for (const auto& [name, cpu] : d.aggregator_thread_cpu_s) by_thread[name] = cpu / records * 1e9;
  out["durable_aggregator_cpu_ns_per_record_by_thread"] = by_thread;
  if (p.curve) {
    // Records/s with CURVE over records/s without, each round against its own plain run; < 1 is the cost.
    std::vector<double> cr, cs;
    for (std::size_t r = 0; r < curves.size(); ++r) {
      cr.push_back(durs[r].secs / curves[r].secs);
      cs.push_back(curves[r].secs);
      d.stored_ok = std::min(d.stored_ok, curves[r].stored_ok);
    }
    out["curve_records_per_s"] = records / median_of(cs);
    out["ratio_curve_vs_plain"] = median_of(cr);
    out["ratio_curve_rounds"] = cr;
  }
  std::cout << out.dump(2) << "\n";
  if (d.stored_ok != static_cast<uint64_t>(p.senders) * p.batches) {
    std::cerr << "ingest_bench: only " << d.stored_ok << " batches were acknowledged as stored\n";
    return 1;
  }
  return 0;
}
