// `netprism-sim live` (live_cluster.hpp): synthetic jobs for rates and sizes, replayed recordings for
// accuracy, all in real time through virtual agents.
#include "live_cluster.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis.hpp"
#include "netprism/addr.hpp"
#include "sim_model.hpp"
#include "stages.hpp"
#include "virtual_agents.hpp"

namespace netprism::sim {
namespace {

constexpr uint64_t kSec = 1'000'000'000ull;
constexpr int kTileIterations = 12;  // simulated once per job, then repeated (sim_model cost stays small)

struct Addr16 {
  uint8_t b[16];
};

Addr16 addr16(const std::string& text) {
  auto a = parse_addr(text);
  if (!a) throw std::invalid_argument("bad address " + text);
  Addr16 r{};
  std::copy(a->begin(), a->end(), r.b);
  return r;
}

Flowlet roce_flowlet(const Addr16& s, const Addr16& d, uint16_t sport, uint32_t qpn, uint64_t t0, uint64_t t1,
                     uint64_t bytes, bool egress) {
  Flowlet f{};
  std::memcpy(f.key.saddr, s.b, 16);
  std::memcpy(f.key.daddr, d.b, 16);
  f.key.ifindex = 2;
  f.key.sport = sport;
  f.key.dport = NP_ROCE_UDP_PORT;
  f.key.qpn = qpn;
  f.key.proto = NP_PROTO_ROCE;
  f.key.dir = egress ? NP_DIR_EGRESS : NP_DIR_INGRESS;
  f.key.family = 4;
  f.first_ns = t0;
  f.last_ns = t1;
  f.packets = (bytes + 4095) / 4096;  // RoCEv2, 4096-byte MTU (as sim_main's to_flowlet)
  f.payload_bytes = bytes + f.packets * 16;
  f.bytes = f.payload_bytes + f.packets * 28;
  f.roce_ops[NP_ROCE_WRITE] = static_cast<uint32_t>(f.packets);
  f.end_reason = NP_END_GAP;
  return f;
}

// One synthetic job: a simulated stretch of kTileIterations iterations on its own nodes, repeated.
struct Job {
  int id = 0;
  std::vector<int> nodes;      // global node of each job-local node
  std::vector<Transfer> tile;  // job-local nodes, times from the simulation's 0, sorted by end
  uint64_t span = 0, base = 0;
  uint64_t tiles = 0, copy = 0;
  size_t next = 0;
  bool done = false;
};

struct ReplayRow {
  uint64_t end_ns;
  size_t agent;
  Flowlet f;
};

class Cluster {
 public:
  explicit Cluster(const LiveClusterOptions& o) : o_(o), rng_(o.seed), truth_(o.truth) {
    for (int i = 0; i < o.nodes; ++i) {
      names_.push_back(node_name(i));
      addrs_.push_back(node_addr(i));
      addr16_.push_back(addr16(addrs_.back()));
      free_.push_back(i);
    }
    std::shuffle(free_.begin(), free_.end(), rng_);
    start_ns_ = now_ns();
    end_ns_ = start_ns_ + static_cast<uint64_t>(o.minutes * 60 * kSec);
    for (const auto& spec : o.replays) load_replay(spec);
    std::sort(replay_.begin(), replay_.end(), [](auto& a, auto& b) { return a.end_ns < b.end_ns; });
  }
  int run();

 private:
  void load_replay(const std::string& spec);
  void start_job(uint64_t now);
  void emit(uint64_t cut, std::vector<std::vector<Flowlet>>& per);
  void emit_job(Job& j, uint64_t cut, std::vector<std::vector<Flowlet>>& per);

  const LiveClusterOptions& o_;
  std::mt19937_64 rng_;
  std::ofstream truth_;
  std::vector<std::string> names_, addrs_;
  std::vector<Addr16> addr16_;
  std::vector<int> free_;
  std::vector<Job> jobs_;
  std::vector<uint64_t> starts_;  // when the next synthetic jobs start
  std::vector<ReplayRow> replay_;
  size_t replay_next_ = 0, replay_specs_ = 0;
  uint32_t next_replay_addr_ = 1;
  int next_id_ = 0;
  uint64_t start_ns_ = 0, end_ns_ = 0;
  uint64_t node_iterations_ =
      0;  // sum over finished iterations of their job's nodes (records per node-iteration)
};

void Cluster::load_replay(const std::string& spec) {
  // CSV:TOPOLOGY:COPIES. Copy c of recording r runs on nodes "r<r>c<c>-<name>" with addresses of its own,
  // starting at 10 s + c * (a third of the run / copies), its times shifted accordingly.
  auto a = spec.find(':'), b = spec.rfind(':');
  if (a == std::string::npos || a == b) throw std::invalid_argument("replay wants CSV:TOPOLOGY:COPIES");
  std::string csv = spec.substr(0, a), topo = spec.substr(a + 1, b - a - 1), err;
  int copies = std::stoi(spec.substr(b + 1));
  auto in = analysis::load_csv(csv, topo, err);
  if (!in || in->events.empty())
    throw std::invalid_argument("replay " + csv + ": " + (err.empty() ? "empty" : err));
  uint64_t first = UINT64_MAX;
  std::set<std::string> addrs;
  for (const auto& e : in->events)
    first = std::min(first, e.first_ns), addrs.insert(e.src), addrs.insert(e.dst);
  for (const auto& [ad, _] : in->addr_node) addrs.insert(ad);
  const int r = static_cast<int>(replay_specs_++);
  const double third = o_.minutes * 60 / 3;
  for (int c = 0; c < copies; ++c) {
    nlohmann::json amap, nmap;
    std::map<std::string, Addr16> a16;
    for (const auto& ad : addrs) {
      uint32_t slot = next_replay_addr_++;
      std::string to = fmt::format("172.{}.{}.{}", 16 + ((slot >> 16) & 15), (slot >> 8) & 255, slot & 255);
      amap[ad] = to;
      a16[ad] = addr16(to);
    }
    std::map<std::string, std::string> node_addrs;  // name -> its addresses, comma separated
    for (const auto& [ad, name] : in->addr_node) {
      auto& s = node_addrs[name];
      if (!s.empty()) s += ',';
      s += amap[ad].get<std::string>();
    }
    std::map<std::string, size_t> agent;
    for (const auto& [name, list] : node_addrs) {
      std::string to = fmt::format("r{}c{}-{}", r, c, name);
      nmap[name] = to;
      agent[name] = names_.size();
      names_.push_back(to);
      addrs_.push_back(list);
    }
    const uint64_t shift = start_ns_ + 10 * kSec + static_cast<uint64_t>(third * c / copies * 1e9) - first;
    for (const auto& e : in->events) {
      std::string obs = e.observer.empty() ? in->addr_node[e.src] : e.observer;
      auto ag = agent.find(obs);
      if (ag == agent.end()) continue;  // seen by no node of the topology: no agent would report it
      const bool v6 = e.src.find(':') != std::string::npos;
      Flowlet f{};
      std::memcpy(f.key.saddr, a16[e.src].b, 16);
      std::memcpy(f.key.daddr, a16[e.dst].b, 16);
      f.key.sport = e.src_port;
      f.key.dport = e.dst_port;
      f.key.qpn = e.qpn;
      f.key.proto = e.proto;
      f.key.dir = NP_DIR_EGRESS;
      f.key.family = 4;
      f.first_ns = e.first_ns + shift;
      f.last_ns = e.last_ns + shift;
      f.packets = e.packets;
      f.bytes = e.bytes;
      // The CSV row's data bytes (its direction unknown) as the payload: the analysis counts the same.
      f.payload_bytes = analysis::data_bytes(e.payload_bytes, e.dir, v6, e.packets, e.bytes);
      f.tcp_flags = e.tcp_flags;
      replay_.push_back({f.last_ns, ag->second, f});
    }
    truth_ << nlohmann::json{{"kind", "replay"}, {"recording", csv}, {"topology", topo}, {"copy", c},
                             {"node_map", nmap}, {"addr_map", amap}, {"shift_ns", shift}}
                  .dump()
           << '\n';
  }
}

void Cluster::start_job(uint64_t now) {
  // Size: 8-512 nodes, uniform over the powers of two allowed (below); shape: PP 1-8; step 0.5-10 s;
  // length 15-50 % of the run, so jobs start and end all along it.
  // Sizes up to twice the fair share of the free nodes among the jobs still to start, so that `jobs` of
  // them run at once; one in eight may take anything that fits (the 256-512-node jobs).
  const size_t open =
      std::max<size_t>(1, static_cast<size_t>(o_.jobs) - std::min<size_t>(jobs_.size(), o_.jobs));
  const int cap = rng_() % 8 == 0 ? 512 : static_cast<int>(2 * free_.size() / open);
  std::vector<int> sizes;
  for (int s = 8; s <= 512; s *= 2)
    if (s <= static_cast<int>(free_.size()) && (s <= cap || s == 8)) sizes.push_back(s);
  if (sizes.empty()) {
    starts_.push_back(now + kSec);
    return;
  }
  const int size = sizes[rng_() % sizes.size()];
  std::vector<int> pps;
  for (int pp = 1; pp <= 8 && pp * 2 <= size; pp *= 2) pps.push_back(pp);
  JobSpec js;
  js.pp = pps[rng_() % pps.size()];
  js.dp = size / js.pp;
  js.micro_batches = 4;
  js.one_f_one_b = rng_() % 2;
  const double step_ms = std::uniform_real_distribution<double>(500, 10'000)(rng_);
  js.fwd_ms = 0.8 * step_ms / (3.0 * (js.micro_batches + js.pp - 1));
  js.optimizer_ms = 0.1 * step_ms;
  js.iterations = kTileIterations;
  ClusterSpec cs;
  cs.nodes = size;
  cs.t0_ns = 0;
  cs.seed = rng_();
  cs.jobs.push_back(js);
  auto s = simulate(cs);
  Job j;
  j.id = next_id_++;
  j.nodes.assign(free_.begin(), free_.begin() + size);
  free_.erase(free_.begin(), free_.begin() + size);
  const auto& its = s.truth["jobs"][0]["iterations"];
  const uint64_t it0 = its.front()["start_ns"].get<uint64_t>();
  j.span = its.back()["end_ns"].get<uint64_t>() - it0;
  j.base = now - it0;
  const double len_s = std::uniform_real_distribution<double>(0.15, 0.5)(rng_) * o_.minutes * 60;
  j.tiles = std::max<uint64_t>(2, static_cast<uint64_t>(len_s * 1e9 / static_cast<double>(j.span)));
  j.tile = std::move(s.transfers);
  std::sort(j.tile.begin(), j.tile.end(), [](auto& a, auto& b) { return a.end_ns < b.end_ns; });
  nlohmann::json names = nlohmann::json::array(), ends = nlohmann::json::array();
  for (int n : j.nodes) names.push_back(names_[static_cast<size_t>(n)]);
  for (uint64_t k = 0; k < j.tiles; ++k)
    for (const auto& it : its) ends.push_back(j.base + it["end_ns"].get<uint64_t>() + k * j.span);
  truth_ << nlohmann::json{{"kind", "sim"},  {"job", j.id},
                           {"nodes", names}, {"dp", js.dp},
                           {"pp", js.pp},    {"step_s", static_cast<double>(j.span) / kTileIterations / 1e9},
                           {"ends", ends}}
                .dump()
         << '\n';
  truth_.flush();
  jobs_.push_back(std::move(j));
}

void Cluster::emit_job(Job& j, uint64_t cut, std::vector<std::vector<Flowlet>>& per) {
  const int nics = std::max(1, o_.nics);
  for (;;) {
    if (j.next == j.tile.size()) {
      j.next = 0;
      node_iterations_ += kTileIterations * j.nodes.size();
      if (++j.copy >= j.tiles) {
        j.done = true;
        return;
      }
    }
    const Transfer& t = j.tile[j.next];
    const uint64_t shift = j.base + j.copy * j.span;
    if (t.end_ns + shift > cut) return;
    const int src = j.nodes[static_cast<size_t>(t.src)], dst = j.nodes[static_cast<size_t>(t.dst)];
    // A new job on nodes an earlier one used has QPs of its own, hence other UDP source ports (RoCEv2 derives
    // them from the QP): the same port would make both jobs one connection, i.e. one job.
    const uint16_t sport = static_cast<uint16_t>(
        49152 + (src_port(src, dst) * 31u + static_cast<uint32_t>(j.id) * 7919u) % 16384);
    // One message per NIC (rail), each on its own QP, reported by the sender (egress) and the receiver.
    for (int r = 0; r < nics; ++r) {
      const uint32_t qpn = t.qpn * static_cast<uint32_t>(nics) + static_cast<uint32_t>(r);
      const uint64_t bytes = std::max<uint64_t>(1, t.bytes / static_cast<uint64_t>(nics));
      const auto &s = addr16_[static_cast<size_t>(src)], &d = addr16_[static_cast<size_t>(dst)];
      per[static_cast<size_t>(src)].push_back(
          roce_flowlet(s, d, sport, qpn, t.start_ns + shift, t.end_ns + shift, bytes, true));
      per[static_cast<size_t>(dst)].push_back(
          roce_flowlet(s, d, sport, qpn, t.start_ns + shift, t.end_ns + shift, bytes, false));
    }
    ++j.next;
  }
}

void Cluster::emit(uint64_t cut, std::vector<std::vector<Flowlet>>& per) {
  for (auto& j : jobs_) emit_job(j, cut, per);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    // Freed nodes go to the back: jobs take from the front, the nodes free the longest.
    std::shuffle(it->nodes.begin(), it->nodes.end(), rng_);
    free_.insert(free_.end(), it->nodes.begin(), it->nodes.end());
    starts_.push_back(cut + std::uniform_int_distribution<uint64_t>(1, 5)(rng_) * kSec);
    it = jobs_.erase(it);
  }
  for (; replay_next_ < replay_.size() && replay_[replay_next_].end_ns <= cut; ++replay_next_)
    per[replay_[replay_next_].agent].push_back(replay_[replay_next_].f);
}

int Cluster::run() {
  VirtualAgents va(o_.endpoint, names_, addrs_);
  va.pump(2000);
  for (int k = 0; k < o_.jobs; ++k) starts_.push_back(start_ns_ + static_cast<uint64_t>(k) * kSec / 2);
  std::vector<std::vector<Flowlet>> per(names_.size());
  int64_t next_tick = now_ms(), next_hb = next_tick, next_report = next_tick + 10'000, t0 = next_tick;
  while (now_ns() < end_ns_) {
    int64_t now = now_ms();
    if (now >= next_tick) {
      // As an agent: a flowlet is reported once it ended (its 1 ms idle gap passed), in a batch per node
      // every 100 ms.
      const uint64_t cut = now_ns() - 1'000'000;
      std::vector<uint64_t> due;
      std::erase_if(starts_, [&](uint64_t s) { return s <= cut ? (due.push_back(s), true) : false; });
      for (size_t k = 0; k < due.size(); ++k) start_job(cut);
      emit(cut, per);
      for (size_t n = 0; n < per.size(); ++n)
        if (!per[n].empty()) va.enqueue(n, std::move(per[n])), per[n].clear();
      next_tick += 100;
    }
    if (now >= next_hb) va.heartbeat_all(), next_hb += 1000;
    if (now >= next_report) {
      auto s = va.stats();
      fmt::print("live: t={}s sent={} acked={} jobs={} free_nodes={} lag_ms={} ack_p99_ms={}\n",
                 (now - t0) / 1000, s.records_sent, s.records_acked, jobs_.size(), free_.size(), va.lag_ms(),
                 va.ack_quantile_ms(0.99));
      std::fflush(stdout);
      next_report += 10'000;
    }
    va.pump(static_cast<int>(std::max<int64_t>(1, std::min(next_tick, next_hb) - now_ms())));
  }
  const double secs = static_cast<double>(now_ms() - t0) / 1000.0;
  const auto at_end = va.stats();
  bool all = va.drain(60'000);
  auto s = va.stats();
  fmt::print(
      "live-done: seconds={:.0f} nodes={} agents={} records_sent={} records_acked={} acked_in_run={} "
      "records_per_s={:.0f} node_iterations={} ack_p50_ms={} ack_p99_ms={} resends={} all_acked={}\n",
      secs, o_.nodes, names_.size(), s.records_sent, s.records_acked, at_end.records_acked,
      static_cast<double>(at_end.records_sent) / secs, node_iterations_, va.ack_quantile_ms(0.5),
      va.ack_quantile_ms(0.99), s.resends, all ? "yes" : "no");
  return all ? 0 : 1;
}

}  // namespace

int run_live_cluster(const LiveClusterOptions& o) {
  Cluster c(o);
  return c.run();
}

}  // namespace netprism::sim
