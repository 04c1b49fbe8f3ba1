// np_exhaustion: issue 18's exhaustion test against the real netprism-aggregator with CURVE. For --seconds
// (60), 8 authenticated-but-hostile peers (their keys in the agents allowlist, each bound to its own node)
// flood maximum-size batches and 100k HELLOs with random node names, while one legitimate agent streams a
// batch every 100 ms (up to 16 unacknowledged, resent after a 5 s ACK timeout as the agent does). Asserts:
// the daemon's peak RSS (VmHWM) <= 1 GiB, the legitimate agent's ACK p99 < 1 s, registered nodes <= the cap
// (--max-nodes 5: the legitimate node and the first four hostile ones; the other hostile HELLOs meet the
// cap), and every seq the legitimate agent sent stored exactly once (counted in the admin `dump`).
// Prints the measurements as JSON; exit 0 when every assertion holds.
//   np_exhaustion AGGREGATOR_BIN [--seconds N] [--hostile N]
// Diagnostics: NP_EXH_NO_BIG=1 / NP_EXH_NO_HELLO=1 leave one half of the flood out; NP_EXH_DEBUG=1 prints
// each legitimate ACK's time (send -> commit, send -> ACK received).
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <thread>

#include "test_sender.hpp"

using namespace netprism;
using namespace netprism::test;
using nlohmann::json;

namespace {

int kHostile = 8;
int g_seconds = 60;                  // --hostile N (0: the legitimate agent alone, a baseline)
constexpr int kHelloFlood = 100000;  // in all, split between the hostile peers
constexpr int kNodeCap = 5;
constexpr uint64_t kStep = 100'000'000ull;  // the legitimate agent's batch interval (the agent's flush)
constexpr auto kAckTimeout = std::chrono::seconds(5);
const std::size_t kMaxMessage = 16u << 20;  // the aggregator's default max_message_bytes

uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The largest batch of random flowlets under the message limit (the hostile peers' payload), made once:
// each peer only renames it (built per peer, 8 x 200k flowlets kept this process busy for seconds).
const Batch& max_batch() {
  static const Batch b = [] {
    std::mt19937_64 rng(1000);
    Batch out;
    out.epoch = 1;
    out.sent_ns = unix_ns();
    out.node = "hostile-0";
    auto add = [&](std::size_t n) {
      for (std::size_t i = 0; i < n; ++i) {
        uint64_t t = out.sent_ns - rng() % 1000000000ull;
        out.flowlets.push_back(make_flowlet("10.214." + std::to_string(rng() % 250) + ".1", "10.214.0.2",
                                            static_cast<uint16_t>(rng()), 29500, t, t + rng() % 100000000,
                                            rng() % (1ull << 40), rng() % (1ull << 30)));
      }
    };
    add(1000);
    const std::size_t per = wire::encode(out).size() / 1000 + 1;
    add((kMaxMessage - 4096) / per - 1000);
    return out;
  }();
  return b;
}

struct Hostile {
  std::atomic<uint64_t> batches{0}, hellos{0};
};

// Peer i's two maximum-size batches (seqs 0 and 1), encoded before the clock starts: encoding 16 of them
// while the legitimate agent streamed took this process ~3 CPU-seconds inside the measured window, on the
// daemon's 2 cores (an attacker would spend that on its own hosts).
std::vector<std::string> big_batches(int i) {
  Batch tmpl = max_batch();
  tmpl.node = "hostile-" + std::to_string(i);
  std::vector<std::string> big;
  for (uint64_t seq : {0, 1}) {
    tmpl.seq = seq;
    big.push_back(wire::encode(tmpl));
  }
  return big;
}

// One hostile peer: maximum-size batches as fast as the aggregator takes them (two seqs, alternating: the
// first of each is stored, the rest are duplicates, so the disk does not fill while every one is decoded),
// and its share of the HELLO flood, spread over the run.
void hostile_peer(zmq::context_t& ctx, const std::string& ep, const keys::ClientCurve& curve, int i,
                  const std::vector<std::string>& big, const std::atomic<bool>& stop, Hostile& h) {
  std::mt19937_64 rng(2000 + i);
  TestSender s(ctx, ep, curve), flood(ctx, ep, curve);  // batches; HELLOs (their own queue)
  s.socket().set(zmq::sockopt::sndhwm, 2);  // our own memory: the flood is paced by the daemon's reading
  (void)s.hello("hostile-" + std::to_string(i), 1);
  const int hellos = kHelloFlood / std::max(kHostile, 1);
  int sent_hellos = 0;
  const uint64_t t0 = mono_ns(), spread = static_cast<uint64_t>(g_seconds) * 800'000'000ull;
  for (uint64_t k = 0; !stop; ++k) {
    const uint64_t due = std::min<uint64_t>(hellos, hellos * (mono_ns() - t0) / spread + 1);
    const bool more_hellos = sent_hellos < static_cast<int>(due) && !std::getenv("NP_EXH_NO_HELLO");
    zmq::pollitem_t it[] = {
        {s.socket().handle(), 0, ZMQ_POLLIN | ZMQ_POLLOUT, 0},
        {flood.socket().handle(), 0, static_cast<short>(ZMQ_POLLIN | (more_hellos ? ZMQ_POLLOUT : 0)), 0}};
    zmq::poll(it, 2, std::chrono::milliseconds(20));
    zmq::message_t m;
    while (s.socket().recv(m, zmq::recv_flags::dontwait) ||
           flood.socket().recv(m, zmq::recv_flags::dontwait)) {
    }
    if (!std::getenv("NP_EXH_NO_BIG") && (it[0].revents & ZMQ_POLLOUT) &&
        s.socket().send(zmq::buffer(big[k % 2]), zmq::send_flags::dontwait))
      h.batches++;
    for (int j = 0;
         j < 50 && more_hellos && sent_hellos < static_cast<int>(due) && (it[1].revents & ZMQ_POLLOUT); ++j) {
      Hello hello;
      hello.node = "rnd-" + std::to_string(rng());
      hello.epoch = rng();
      hello.agent_version = "hostile";
      if (!flood.socket().send(zmq::buffer(wire::encode(hello)), zmq::send_flags::dontwait)) break;
      ++sent_hellos;
      h.hellos++;
    }
    if (!more_hellos && !(it[0].revents & ZMQ_POLLOUT))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // nothing to do: no spinning
  }
}

struct Legit {
  std::vector<uint64_t> latencies_ns;
  uint64_t sent = 0, resent = 0;
  bool all_acked = false;
};

Batch legit_batch(uint64_t seq) {
  Batch b;
  b.node = "legit";
  b.epoch = 1;
  b.seq = seq;
  b.sent_ns = unix_ns();
  for (int i = 0; i < 64; ++i)
    b.flowlets.push_back(make_flowlet("10.215.0.1", "10.215.0.2", static_cast<uint16_t>(40000 + i), 29500,
                                      b.sent_ns - 90000000, b.sent_ns - 1000, 150000, 100));
  return b;
}

// Streams a batch every kStep until `stop`, then drains: every batch resent until acknowledged (30 s at
// most).
void legit_agent(zmq::context_t& ctx, const std::string& ep, const keys::ClientCurve& curve,
                 const std::atomic<bool>& stop, Legit& out) {
  TestSender s(ctx, ep, curve);
  auto h = s.hello("legit", 1);
  if (!h || h->status != AckStatus::kHelloOk) return;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> unacked;  // seq -> first send, last send (mono ns)
  std::map<uint64_t, std::string> bytes;
  const uint64_t t0 = mono_ns();
  uint64_t drain_until = 0;
  while (true) {
    const uint64_t now = mono_ns();
    if (stop && !drain_until) drain_until = now + 30'000'000'000ull;
    if (drain_until && (unacked.empty() || now > drain_until)) break;
    if (!drain_until && unacked.size() < 16 && now >= t0 + out.sent * kStep) {
      bytes[out.sent] = wire::encode(legit_batch(out.sent));
      s.send_raw(bytes[out.sent]);
      unacked[out.sent] = {now, now};
      out.sent++;
    }
    for (auto& [seq, t] : unacked)
      if (now - t.second > static_cast<uint64_t>(kAckTimeout.count()) * 1000000000ull) {
        s.send_raw(bytes[seq]);
        t.second = now;
        out.resent++;
      }
    while (auto a = s.recv_ack(std::chrono::milliseconds(5))) {
      auto it = unacked.find(a->seq);
      if (it == unacked.end() || (a->status != AckStatus::kOk && a->status != AckStatus::kDuplicate))
        continue;
      out.latencies_ns.push_back(mono_ns() - it->second.first);
      if (std::getenv("NP_EXH_DEBUG"))
        std::cerr << "seq " << a->seq << " total " << (mono_ns() - it->second.first) / 1000000
                  << " ms, to commit "
                  << (static_cast<int64_t>(a->server_ns) - static_cast<int64_t>(unix_ns()) +
                      static_cast<int64_t>((mono_ns() - it->second.first))) /
                         1000000
                  << " ms\n";
      unacked.erase(it);
      bytes.erase(a->seq);
    }
  }
  out.all_acked = unacked.empty();
}

long vm_hwm_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// seq -> how many times the admin `dump` holds it, for `node`.
std::map<uint64_t, int> stored_seqs(zmq::context_t& ctx, const AggregatorProcess& p,
                                    const std::string& node) {
  std::map<uint64_t, int> out;
  int64_t after = 0;
  for (int page = 0; page < 100000; ++page) {
    auto r = p.query(ctx, {{"cmd", "dump"}, {"after_id", after}}, 60000);
    if (!r || !r->value("ok", false)) throw std::runtime_error("dump failed");
    const auto& res = (*r)["result"];
    if (res["done"].get<bool>()) break;
    for (const auto& b : res["batches"]) {
      after = std::max<int64_t>(after, b["id"].get<int64_t>());
      if (b["node"] == node) out[b["seq"].get<uint64_t>()]++;
    }
  }
  return out;
}

template <class Client>
int run_and_check(zmq::context_t& ctx, AggregatorProcess& proc, Client client, int seconds) {
  std::atomic<bool> stop{false}, legit_stop{false};
  Legit legit;
  std::vector<std::vector<std::string>> big;
  for (int i = 0; i < kHostile; ++i) big.push_back(big_batches(i));  // before the clock starts
  // The legitimate agent has its own ZeroMQ context (its own I/O thread), as a separate host would: sharing
  // the hostile peers' I/O threads, its batches waited behind their CURVE encryption of 16 MiB messages in
  // this process, not in the aggregator.
  zmq::context_t legit_ctx(1);
  std::thread lt([&] { legit_agent(legit_ctx, proc.listen(), client("legit"), legit_stop, legit); });
  // The legitimate node registers first (it was there before the attack), then the flood starts.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<Hostile> hostile(kHostile);
  std::vector<std::thread> ht;
  for (int i = 0; i < kHostile; ++i)
    ht.emplace_back([&, i] {
      hostile_peer(ctx, proc.listen(), client("hostile-" + std::to_string(i)), i, big[i], stop, hostile[i]);
    });
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  legit_stop = true;  // the legitimate agent drains (while the flood goes on), then the flood stops
  lt.join();
  stop = true;
  for (auto& t : ht) t.join();
  const long hwm = vm_hwm_kib(proc.pid());
  auto st = proc.query(ctx, {{"cmd", "status"}}, 30000);
  auto seqs = stored_seqs(ctx, proc, "legit");
  uint64_t missing = 0, doubled = 0;
  for (uint64_t q = 0; q < legit.sent; ++q) {
    const int n = seqs.count(q) ? seqs[q] : 0;
    missing += n == 0;
    doubled += n > 1;
  }
  auto lat = legit.latencies_ns;
  std::sort(lat.begin(), lat.end());
  const double p99 = lat.empty() ? 1e9 : lat[std::min(lat.size() - 1, lat.size() * 99 / 100)] / 1e9;
  const double p50 = lat.empty() ? 1e9 : lat[lat.size() / 2] / 1e9;
  uint64_t flood_batches = 0, flood_hellos = 0;
  for (auto& h : hostile) {
    flood_batches += h.batches;
    flood_hellos += h.hellos;
  }
  const json in = st ? (*st)["result"]["ingest"] : json::object();
  const std::size_t nodes = st ? (*st)["result"]["agents"].size() : 999;
  json out = {{"seconds", seconds},
              {"vm_hwm_mib", hwm / 1024.0},
              {"legit_sent", legit.sent},
              {"legit_resent", legit.resent},
              {"legit_ack_p50_s", p50},
              {"legit_ack_p99_s", p99},
              {"legit_ack_max_s", lat.empty() ? 0 : lat.back() / 1e9},
              {"legit_missing", missing},
              {"legit_stored_twice", doubled},
              {"hostile_batches_sent", flood_batches},
              {"hostile_hellos_sent", flood_hellos},
              {"registered_nodes", nodes},
              {"node_cap", kNodeCap},
              {"ingest", in},
              {"auth", st ? (*st)["result"].value("auth", json::object()) : json::object()}};
  out["ingest"].erase("rejected_by_reason");
  std::cout << out.dump(1) << "\n";
  bool ok = true;
  auto check = [&](bool cond, const std::string& what) {
    if (!cond) std::cerr << "np_exhaustion: FAILED: " << what << "\n";
    ok = ok && cond;
  };
  check(proc.alive(), "the aggregator is alive");
  check(hwm > 0 && hwm <= 1024 * 1024, "peak RSS <= 1 GiB");
  check(legit.all_acked && legit.sent > 0, "every legitimate batch acknowledged");
  check(p99 < 1.0, "legitimate ACK p99 < 1 s");
  check(nodes <= static_cast<std::size_t>(kNodeCap), "registered nodes <= the cap");
  check(missing == 0 && doubled == 0, "every legitimate seq stored exactly once");
  // The daemon cuts a flooding key at the transport (aggregator/daemon/peer_cut.hpp): its connections are
  // shut and its key refused, so a cut peer's HELLOs after the cut cannot be sent. The flood counts as sent
  // when each peer sent its share, or was cut for it. The legitimate agent is never cut.
  const json cut_by = in.value("cut_by_peer", json::object());
  int short_uncut = 0;
  for (int i = 0; i < kHostile; ++i)
    short_uncut += hostile[i].hellos < static_cast<uint64_t>(kHelloFlood / kHostile) * 9 / 10 &&
                   !cut_by.contains("hostile-" + std::to_string(i));
  check(short_uncut == 0, "the HELLO flood was sent (or its sender cut)");
  check(!cut_by.contains("legit"), "the legitimate agent was never cut");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: np_exhaustion AGGREGATOR_BIN [--seconds N]\n";
    return 2;
  }
  const std::string bin = argv[1];
  int seconds = 60;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--seconds") seconds = g_seconds = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--hostile") kHostile = std::stoi(argv[i + 1]);
  }
  const std::string dir =
      std::filesystem::temp_directory_path() / ("np_exhaust_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::string d;
    ~Cleanup() { std::filesystem::remove_all(d); }
  } cleanup{dir};
  std::vector<std::string> names = {"server", "legit", "admin"};
  for (int i = 0; i < kHostile; ++i) names.push_back("hostile-" + std::to_string(i));
  std::string err;
  for (const auto& n : names)
    if (auto e = keys::generate(dir + "/" + n); !e.empty()) {
      std::cerr << e << "\n";
      return 1;
    }
  auto pub = [&](const std::string& n) {
    return keys::read_public(dir + "/" + n + ".pub", err).value_or("");
  };
  auto client = [&](const std::string& n) {
    keys::ClientCurve c;
    (void)keys::load_client(dir + "/" + n + ".key", dir + "/server.pub", c);
    return c;
  };
  {
    std::ofstream agents(dir + "/agents");
    agents << "legit " << pub("legit") << "\n";
    for (int i = 0; i < kHostile; ++i)
      agents << "hostile-" << i << " " << pub("hostile-" + std::to_string(i)) << "\n";
    std::ofstream(dir + "/clients") << "admin " << pub("admin") << "\n";
  }
  AggregatorProcess proc(bin, dir + "/data", free_port(), free_port(),
                         {"--server-key", dir + "/server.key", "--agents", dir + "/agents", "--clients",
                          dir + "/clients", "--max-nodes", std::to_string(kNodeCap)});
  proc.set_client(client("admin"));
  zmq::context_t ctx(4);
  if (!proc.wait_ready(ctx)) {
    std::cerr << "np_exhaustion: aggregator did not come up\n";
    return 1;
  }
  return run_and_check(ctx, proc, client, seconds);
}
