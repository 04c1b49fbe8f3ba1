// netprism-sim: a simulated cluster of training jobs, as CSV (contracts.md import format) + topology + truth,
// or streamed into an aggregator by many virtual agents over the real wire protocol; plus an ingest load
// test.
#include <sys/resource.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "netprism/addr.hpp"
#include "netprism/cli.hpp"
#include "live_cluster.hpp"
#include "sim_model.hpp"
#include "virtual_agents.hpp"

using namespace netprism;
using namespace netprism::sim;

namespace {

std::map<std::string, std::string> kv(const std::string& spec) {
  std::map<std::string, std::string> out;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    auto eq = item.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("'" + item + "' is not key=value");
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

JobSpec parse_job(const std::string& spec) {
  JobSpec j;
  for (const auto& [k, v] : kv(spec)) {
    if (k == "dp")
      j.dp = std::stoi(v);
    else if (k == "pp")
      j.pp = std::stoi(v);
    else if (k == "tp")
      j.tp = std::stoi(v);
    else if (k == "ep")
      j.ep = std::stoi(v);
    else if (k == "mb")
      j.micro_batches = std::stoi(v);
    else if (k == "sched")
      j.one_f_one_b = (v == "1f1b");
    else if (k == "iters")
      j.iterations = std::stoi(v);
    else if (k == "fwd_ms")
      j.fwd_ms = std::stod(v);
    else if (k == "act_mb")
      j.activation_mb = std::stod(v);
    else if (k == "grad_mb")
      j.grad_mb = std::stod(v);
    else if (k == "opt_ms")
      j.optimizer_ms = std::stod(v);
    else if (k == "jitter")
      j.jitter = std::stod(v);
    else if (k == "offset_ms")
      j.start_offset_ms = std::stod(v);
    else
      throw std::invalid_argument("unknown job key '" + k + "'");
  }
  if (j.dp < 1 || j.pp < 1 || j.micro_batches < 1 || j.iterations < 1 || j.ep < 1)
    throw std::invalid_argument("dp, pp, mb, iters and ep must be >= 1");
  return j;
}

std::pair<int, FaultSpec> parse_fault(const std::string& spec) {
  FaultSpec f;
  int job = 0;
  for (const auto& [k, v] : kv(spec)) {
    if (k == "job")
      job = std::stoi(v);
    else if (k == "kind")
      f.kind = v;
    else if (k == "node")
      f.node = std::stoi(v);
    else if (k == "peer")
      f.peer = std::stoi(v);
    else if (k == "factor")
      f.factor = std::stod(v);
    else if (k == "from")
      f.from_iteration = std::stoi(v);
    else
      throw std::invalid_argument("unknown fault key '" + k + "'");
  }
  if (f.kind != "straggler" && f.kind != "slow_link" && f.kind != "hang")
    throw std::invalid_argument("fault kind must be straggler, slow_link or hang");
  return {job, f};
}

// Four jobs sharing the cluster, with different pipeline depths, so scale runs exercise every stage.
std::vector<JobSpec> scale_preset(int nodes, int iterations) {
  std::vector<JobSpec> jobs;
  const int per = nodes / 4;
  const int pps[4] = {8, 4, 2, 1};
  for (int k = 0; k < 4; ++k) {
    JobSpec j;
    j.pp = std::min(pps[k], per);
    j.dp = per / j.pp;
    j.micro_batches = 4;
    j.one_f_one_b = k % 2 == 0;
    j.iterations = iterations;
    j.start_offset_ms = 37.0 * k;
    jobs.push_back(j);
  }
  return jobs;
}

Flowlet to_flowlet(const Transfer& t, bool egress) {
  Flowlet f{};
  auto s = parse_addr(node_addr(t.src)), d = parse_addr(node_addr(t.dst));
  std::copy(s->begin(), s->end(), f.key.saddr);
  std::copy(d->begin(), d->end(), f.key.daddr);
  f.key.ifindex = 2;
  f.key.sport = src_port(t.src, t.dst);
  f.key.dport = NP_ROCE_UDP_PORT;
  f.key.qpn = t.qpn;
  f.key.proto = NP_PROTO_ROCE;
  f.key.dir = egress ? NP_DIR_EGRESS : NP_DIR_INGRESS;
  f.key.family = 4;
  f.first_ns = t.start_ns;
  f.last_ns = t.end_ns;
  // RoCEv2 with a 4096-byte MTU: per packet a 12-byte BTH and 4-byte ICRC in the UDP payload, 28 bytes of
  // IPv4 + UDP header around it.
  f.packets = (t.bytes + 4095) / 4096;
  f.payload_bytes = t.bytes + f.packets * 16;
  f.bytes = f.payload_bytes + f.packets * 28;
  f.roce_ops[NP_ROCE_WRITE] = static_cast<uint32_t>(f.packets);
  f.end_reason = NP_END_GAP;
  return f;
}

int write_outputs(const Simulation& sim, int nodes, const std::string& csv, const std::string& topo,
                  const std::string& truth) {
  if (!csv.empty()) {
    std::ofstream o(csv);
    if (!o) return cli::fail("netprism-sim", "cannot write " + csv);
    o << "src_ip,dst_ip,src_port,dst_port,bytes,start_ns,end_ns,proto,qpn,packets,node\n";
    for (const auto& t : sim.transfers)
      o << fmt::format("{},{},{},{},{},{},{},roce,{},{},{}\n", node_addr(t.src), node_addr(t.dst),
                       src_port(t.src, t.dst), NP_ROCE_UDP_PORT, t.bytes, t.start_ns, t.end_ns, t.qpn,
                       (t.bytes + 4095) / 4096, node_name(t.src));
    if (!o) return cli::fail("netprism-sim", "write failed: " + csv);
  }
  if (!topo.empty()) {
    std::ofstream o(topo);
    for (int i = 0; i < nodes; ++i) o << node_addr(i) << ' ' << node_name(i) << '\n';
    if (!o) return cli::fail("netprism-sim", "write failed: " + topo);
  }
  if (!truth.empty()) {
    std::ofstream o(truth);
    o << sim.truth.dump(1) << '\n';
    if (!o) return cli::fail("netprism-sim", "write failed: " + truth);
  }
  return 0;
}

void raise_nofile(size_t need) {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  if (r.rlim_cur < need) {
    r.rlim_cur = std::min<rlim_t>(std::max<rlim_t>(need, r.rlim_cur), r.rlim_max);
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"netprism-sim: simulated training clusters for netprism scale and load tests", "netprism-sim"};
  cli::standard_flags(app);
  app.require_subcommand(1);
  int nodes = 16, iterations = 100;
  uint64_t seed = 1;
  std::vector<std::string> job_specs, fault_specs;
  std::string csv, topo, truth, endpoint = "tcp://127.0.0.1:7470";
  bool scale = false;
  auto add_cluster = [&](CLI::App* c) {
    c->add_option("--nodes", nodes, "cluster size")->check(CLI::Range(1, 1 << 20));
    c->add_option("--iterations", iterations, "iterations per job (scale preset)")
        ->check(CLI::PositiveNumber);
    c->add_option("--seed", seed, "random seed");
    c->add_option("--job", job_specs, "job: dp=,pp=,tp=,ep=,mb=,sched=1f1b|gpipe,iters=,fwd_ms=,...");
    c->add_option("--fault", fault_specs,
                  "fault: job=,kind=straggler|slow_link|hang,node=,peer=,factor=,from=");
    c->add_flag("--scale-preset", scale, "four jobs of different shapes sharing the cluster");
    c->add_option("--truth", truth, "write ground truth JSON here");
  };
  auto* gen = app.add_subcommand("generate", "write a flow CSV, topology and truth");
  add_cluster(gen);
  gen->add_option("--csv", csv, "flow CSV output")->required();
  gen->add_option("--topology", topo, "topology output (IP NODE)");
  auto* stream =
      app.add_subcommand("stream", "stream a simulated cluster into an aggregator as virtual agents");
  add_cluster(stream);
  stream->add_option("--aggregator", endpoint, "aggregator ingest endpoint");
  bool realtime = false;
  stream->add_flag(
      "--realtime", realtime,
      "play the cluster in real time from now on, each node sending what ended in the last 100 ms "
      "(as an agent does), instead of replaying a past that ends now");
  int agents = 1000, rate = 200, duration = 60;
  auto* load = app.add_subcommand("load", "ingest load test: virtual agents at a fixed record rate");
  load->add_option("--aggregator", endpoint, "aggregator ingest endpoint");
  load->add_option("--agents", agents, "virtual agents")->check(CLI::Range(1, 100000));
  load->add_option("--rate", rate, "records/s per agent")->check(CLI::Range(1, 1000000));
  load->add_option("--duration", duration, "seconds")->check(CLI::Range(1, 3600));
  LiveClusterOptions live_opt;
  auto* live = app.add_subcommand(
      "live", "a large cluster in real time: synthetic jobs starting and ending, plus replayed recordings");
  live->add_option("--aggregator", live_opt.endpoint, "aggregator ingest endpoint")->required();
  live->add_option("--nodes", live_opt.nodes, "cluster nodes")->check(CLI::Range(8, 100000));
  live->add_option("--jobs", live_opt.jobs, "concurrent synthetic jobs")->check(CLI::Range(0, 10000));
  live->add_option("--nics", live_opt.nics, "NICs per node (flowlets per transfer and end)")
      ->check(CLI::Range(1, 64));
  live->add_option("--minutes", live_opt.minutes, "how long")->check(CLI::PositiveNumber);
  live->add_option("--seed", live_opt.seed, "random seed");
  live->add_option("--truth", live_opt.truth, "truth, JSON lines")->required();
  live->add_option("--replay", live_opt.replays, "CSV:TOPOLOGY:COPIES, a recording replayed as copies");
  if (auto rc = cli::parse(app, argc, argv)) return *rc;
  if (live->parsed()) {
    raise_nofile(static_cast<size_t>(live_opt.nodes) * 2 + 4096);
    try {
      return run_live_cluster(live_opt);
    } catch (const std::exception& e) {
      return cli::fail("netprism-sim", e.what());
    }
  }

  if (load->parsed()) {
    raise_nofile(static_cast<size_t>(agents) * 2 + 256);
    std::vector<std::string> names, addrs;
    for (int i = 0; i < agents; ++i) names.push_back(node_name(i)), addrs.push_back(node_addr(i));
    VirtualAgents va(endpoint, names, addrs);
    va.pump(1000);
    const int per_tick = std::max(1, rate / 10);  // a batch every 100 ms, the agent's own cadence
    int64_t start = now_ms(), next_tick = start, next_hb = start, next_report = start + 5000;
    uint64_t max_unacked = 0, prev_acked = 0;
    int64_t prev_report = start;
    while (now_ms() - start < duration * 1000LL) {
      int64_t now = now_ms();
      if (now >= next_tick) {
        uint64_t t = now_ns();
        for (int i = 0; i < agents; ++i) {
          std::vector<Flowlet> fl;
          fl.reserve(per_tick);
          for (int k = 0; k < per_tick; ++k)
            fl.push_back(to_flowlet(
                {i, (i + 1 + k) % agents, static_cast<uint32_t>(k), t - 90'000'000, t, 65536}, true));
          va.enqueue(static_cast<size_t>(i), std::move(fl));
        }
        next_tick += 100;
      }
      if (now >= next_hb) va.heartbeat_all(), next_hb += 1000;
      if (now >= next_report) {
        // One line per 5 s: acknowledged rate over the interval and the lag (age of the oldest batch not
        // yet acknowledged; a backlog that grows shows as a lag that grows). run_load.sh parses these.
        auto s = va.stats();
        fmt::print(
            "sample t={}s sent={} acked={} acked_rate={:.0f}/s unacked_batches={} lag_ms={} resends={}\n",
            (now - start) / 1000, s.records_sent, s.records_acked,
            (s.records_acked - prev_acked) * 1000.0 / std::max<int64_t>(1, now - prev_report),
            va.unacked_batches(), va.lag_ms(), s.resends);
        std::fflush(stdout);
        prev_acked = s.records_acked;
        prev_report = now;
        next_report += 5000;
      }
      max_unacked = std::max(max_unacked, va.unacked_batches());
      va.pump(static_cast<int>(std::max<int64_t>(1, std::min(next_tick, next_hb) - now_ms())));
    }
    const double run_secs = (now_ms() - start) / 1000.0;
    const auto at_end = va.stats();
    bool all = va.drain(60000);
    auto s = va.stats();
    double secs = (now_ms() - start) / 1000.0;
    fmt::print(
        "load: agents={} rate={}/s duration={}s records_sent={} records_acked={} acked_rate={:.0f}/s "
        "acked_in_run={} run_rate={:.0f}/s drain_s={:.1f} max_unacked_batches={} resends={} rejected={} "
        "all_acked={}\n",
        agents, rate, duration, s.records_sent, s.records_acked, s.records_acked / secs, at_end.records_acked,
        at_end.records_acked / run_secs, secs - run_secs, max_unacked, s.resends, s.rejected,
        all ? "yes" : "no");
    return all && s.rejected == 0 ? 0 : 1;
  }

  ClusterSpec spec;
  spec.nodes = nodes;
  spec.seed = seed;
  try {
    if (scale) spec.jobs = scale_preset(nodes, iterations);
    for (const auto& j : job_specs) spec.jobs.push_back(parse_job(j));
    for (const auto& f : fault_specs) {
      auto [job, fault] = parse_fault(f);
      if (job < 0 || job >= static_cast<int>(spec.jobs.size()))
        throw std::invalid_argument("fault names no job");
      const auto& js = spec.jobs[job];
      if (fault.node < 0 || fault.node >= js.dp * js.pp || fault.peer >= js.dp * js.pp)
        throw std::invalid_argument("fault node outside its job");
      spec.jobs[job].faults.push_back(fault);
    }
  } catch (const std::exception& e) {
    std::cerr << "netprism-sim: " << e.what() << " (see --help)\n";
    return cli::kExitUsage;
  }
  int used = 0;
  for (const auto& j : spec.jobs) used += j.dp * j.pp;
  if (spec.jobs.empty()) return cli::fail("netprism-sim", "no job: give --job or --scale-preset");
  if (used > nodes)
    return cli::fail("netprism-sim", fmt::format("jobs need {} nodes, the cluster has {}", used, nodes));

  if (gen->parsed()) {
    auto sim = simulate(spec);
    fmt::print(stderr, "netprism-sim: {} transfers, {} jobs, {} nodes\n", sim.transfers.size(),
               spec.jobs.size(), nodes);
    return write_outputs(sim, nodes, csv, topo, truth);
  }

  // stream: the simulated timeline is shifted to end now (replay), or to start 1 s from now (--realtime), so
  // the aggregator sees recent, live-looking traffic.
  spec.t0_ns = 0;
  auto sim = simulate(spec);
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& t : sim.transfers) first = std::min(first, t.start_ns), last = std::max(last, t.end_ns);
  const uint64_t shift = realtime ? now_ns() + 1'000'000'000ull - first : now_ns() - last;
  for (auto& t : sim.transfers) t.start_ns += shift, t.end_ns += shift;
  // The truth carries the same shift (every *_ns field of it).
  for (auto& j : sim.truth["jobs"]) {
    for (auto& it : j["iterations"])
      for (const char* k : {"start_ns", "end_ns"}) it[k] = it[k].get<uint64_t>() + shift;
    for (auto& f : j["faults"])
      if (f.contains("start_ns")) f["start_ns"] = f["start_ns"].get<uint64_t>() + shift;
  }
  if (int rc = write_outputs(sim, nodes, "", "", truth)) return rc;
  raise_nofile(static_cast<size_t>(nodes) * 2 + 256);
  std::vector<std::string> names, addrs;
  for (int i = 0; i < nodes; ++i) names.push_back(node_name(i)), addrs.push_back(node_addr(i));
  VirtualAgents va(endpoint, names, addrs);
  std::vector<std::vector<Flowlet>> per(nodes);
  auto flush = [&](int n) {
    if (!per[n].empty()) va.enqueue(n, std::move(per[n])), per[n].clear();
  };
  if (realtime) {
    // As an agent: a flowlet is reported once it ended (its idle gap, 1 ms, passed), in a batch per node
    // every 100 ms, plus a heartbeat every second.
    std::vector<const Transfer*> by_end;
    for (const auto& t : sim.transfers) by_end.push_back(&t);
    std::sort(by_end.begin(), by_end.end(), [](auto* a, auto* b) { return a->end_ns < b->end_ns; });
    size_t next = 0;
    int64_t next_tick = now_ms(), next_hb = next_tick;
    while (next < by_end.size()) {
      int64_t now = now_ms();
      if (now >= next_tick) {
        uint64_t cut = now_ns() - 1'000'000;
        while (next < by_end.size() && by_end[next]->end_ns <= cut) {
          const Transfer& t = *by_end[next++];
          per[t.src].push_back(to_flowlet(t, true));
          per[t.dst].push_back(to_flowlet(t, false));
        }
        for (int n = 0; n < nodes; ++n) flush(n);
        next_tick += 100;
      }
      if (now >= next_hb) va.heartbeat_all(), next_hb += 1000;
      va.pump(static_cast<int>(std::max<int64_t>(1, std::min(next_tick, next_hb) - now_ms())));
    }
  }
  for (size_t i = 0; !realtime && i < sim.transfers.size(); ++i) {
    const auto& t = sim.transfers[i];
    per[t.src].push_back(to_flowlet(t, true));
    per[t.dst].push_back(to_flowlet(t, false));
    if (per[t.src].size() >= 512) flush(t.src);
    if (per[t.dst].size() >= 512) flush(t.dst);
  }
  for (int n = 0; n < nodes; ++n) flush(n);
  bool all = va.drain(120000);
  auto s = va.stats();
  fmt::print("stream: nodes={} transfers={} records_sent={} records_acked={} resends={} all_acked={}\n",
             nodes, sim.transfers.size(), s.records_sent, s.records_acked, s.resends, all ? "yes" : "no");
  return all ? 0 : 1;
}
