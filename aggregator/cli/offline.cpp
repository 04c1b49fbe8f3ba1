#include "offline.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <fstream>
#include <iostream>
#include <sstream>

#include "analysis.hpp"
#include "capture_import.hpp"
#include "feed.hpp"
#include "incremental.hpp"
#include "topology.hpp"
#include "flows.hpp"
#include "netprism/addr.hpp"
#include "store.hpp"

namespace netprism::cli {

namespace {
bool looks_like_sqlite(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[16] = {};
  in.read(head, sizeof head);
  return in.gcount() == 16 && std::string(head, 15) == "SQLite format 3";
}

std::optional<std::string> unbase64(const std::string& in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (std::size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    for (int k = 0; k < 4; ++k) v[k] = in[i + k] == '=' ? 0 : val(in[i + k]);
    if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0) return std::nullopt;
    uint32_t x = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>(x >> 16);
    if (in[i + 2] != '=') out += static_cast<char>((x >> 8) & 0xff);
    if (in[i + 3] != '=') out += static_cast<char>(x & 0xff);
  }
  return out;
}

// Progress of a long command, on a terminal only (a pipe or a file gets nothing): one line, rewritten.
void progress(const std::string& line) {
  static const bool tty = ::isatty(STDERR_FILENO) == 1;
  if (tty) std::cerr << "\r\033[K" << line << std::flush;
}
void progress_done() {
  progress("");
}
// Clears the line however the command ends (an error message must not land behind a progress line).
struct ProgressLine {
  ProgressLine() = default;
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { progress_done(); }
};

}  // namespace

void add_rdma(const Batch& b, analysis::Input& in) {
  // RDMA counters (counters-only agents): port bursts, QP rows at their read time, last table read.
  for (const auto& r : b.rdma_bursts) in.rdma_bursts.push_back({b.node, r});
  for (const auto& q : b.qps) in.qps.push_back({b.node, q.ts_ns ? q.ts_ns : b.sent_ns, q});
  if (auto it = b.counters.find("rdma_qp_table_read_ns"); it != b.counters.end())
    in.qp_read_ns[b.node] = std::max(in.qp_read_ns[b.node], it->second);
}

analysis::Input load_native(store::Store& s, std::vector<std::string>& warnings) {
  analysis::Input in;
  in.offline = true;  // a recording, not a live feed (the analysis judges hung/ended differently then)
  in.addr_node = store::addr_nodes(s.nodes());
  const store::OwnTraffic own = store::own_traffic(s);
  s.scan_batches(
      std::nullopt, 0, std::numeric_limits<uint64_t>::max(),
      [&](const Batch& b, uint64_t) {
        for (const auto& f : b.flowlets) {
          if (own.matches(f)) continue;
          in.events.push_back(analysis::flow_event(b.node, f));
          in.now_ns = std::max<uint64_t>(in.now_ns, f.last_ns);
        }
        add_rdma(b, in);
      },
      [&](const std::string& e) { warnings.push_back(e); });
  return in;
}

Analysed stream_native(store::Store& s, const std::map<std::string, std::string>& addr_node, TimeRange range,
                       std::vector<std::string>& warnings, bool* rdma_counters) {
  // Exact as analyze() (Input::offline): connections are never forgotten and no transfer is evicted early
  // (no window, no bounds); what bounds memory is the passes, which keep each job's transfers only as far
  // back as its tail.
  analysis::StreamingAnalysis::Limits lim;
  lim.window_ns = std::numeric_limits<uint64_t>::max();
  lim.max_xfers = std::numeric_limits<std::size_t>::max();
  lim.max_conns = std::numeric_limits<std::size_t>::max();
  analysis::StreamingAnalysis engine(lim);
  analysis::FlowletFeed feed(engine);
  engine.set_addr_nodes(addr_node);
  const store::OwnTraffic own = store::own_traffic(s);
  uint64_t now = 0, next_pass = 0, events = 0;
  auto skip = [&](const Flowlet& f) {
    if (own.matches(f) || f.last_ns < range.since || f.first_ns > range.until) return true;
    now = std::max<uint64_t>(now, f.last_ns);
    return false;
  };
  // Batches come in time order (scan_batches: by first record time), a cursor over the store: only the
  // current batch is in memory besides the engine.
  s.scan_batches(
      std::nullopt, range.since, range.until,
      [&](const Batch& b, uint64_t) {
        if (rdma_counters && !b.rdma_bursts.empty()) *rdma_counters = true;
        events += feed.add(b.node, b.flowlets, skip);
        if (now < next_pass) return;
        if (next_pass > 0) engine.pass(now);
        next_pass = now + kStreamPassNs;
        progress("netprism: analysing " + std::to_string(events) + " flow events ...");
      },
      [&](const std::string& e) { warnings.push_back(e); });
  engine.set_offline(true);  // the last pass judges states as analyze() does a recording's
  Analysed out{engine.pass(now), now};
  // The engine numbers a hang onto the job's whole history (first_iteration: past its last iteration) but
  // the evidence of a recording's hang (diagnosis.cpp) names the iteration count and step of the tail the
  // last pass analysed; analyze() names the whole history's: first_iteration and the job's step time.
  static const std::string kStops = "the recording's periodic traffic stops after ";
  static const std::string kOpen = " without the connections being torn down";
  for (auto& j : out.result.jobs)
    for (auto& f : j.findings)
      if (const auto end = f.evidence.find(kOpen);
          f.kind == "hang" && f.evidence.starts_with(kStops) && end != std::string::npos) {
        char step[64];
        std::snprintf(step, sizeof step, " iterations (step %.1f ms)", j.step_time_ms);
        f.evidence.replace(0, end, kStops + std::to_string(f.first_iteration) + step);
      }
  return out;
}

namespace {
// Events of a CSV or capture inside the range (both ends included, as the store's scan).
void clip(analysis::Input& in, TimeRange range) {
  if (range.since == 0 && range.until == std::numeric_limits<uint64_t>::max()) return;
  std::erase_if(in.events, [&](const analysis::FlowEvent& e) {
    return e.last_ns < range.since || e.first_ns > range.until;
  });
  std::erase_if(in.rdma_bursts, [&](const analysis::NodePortBurst& b) {
    return b.burst.last_ns < range.since || b.burst.first_ns > range.until;
  });
  in.now_ns = 0;
  for (const auto& e : in.events) in.now_ns = std::max(in.now_ns, e.last_ns);
  for (const auto& b : in.rdma_bursts) in.now_ns = std::max(in.now_ns, b.burst.last_ns);
}
}  // namespace

std::optional<Analysed> analyze_recording(const std::string& input, std::string format,
                                          const std::string& topology, std::string& err, TimeRange range) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(input, ec)) {
    err = input + ": no such file or directory";
    return std::nullopt;
  }
  bool is_dir = fs::is_directory(input, ec);
  if (format.empty()) format = is_dir || looks_like_sqlite(input) ? "native" : "csv";
  analysis::Input in;
  ProgressLine line;
  progress("netprism: reading " + input + " ...");
  if (format == "csv" || format == "rdma-counters") {
    auto r = format == "csv" ? analysis::load_csv(input, topology, err)
                             : analysis::load_rdma_counters(input, topology, err);
    if (!r) return std::nullopt;
    in = std::move(*r);
  } else if (auto proto = flowin::parse_protocol(format)) {
    std::vector<std::string> warnings;
    auto r = flowin::load_capture(input, *proto, topology, warnings, err);
    if (!r) return std::nullopt;
    for (const auto& w : warnings) std::cerr << "netprism: warning: " << w << "\n";
    in = std::move(*r);
  } else {
    return analyze_native(input, topology, range, err);
  }
  clip(in, range);
  progress("netprism: analysing " + std::to_string(in.events.size()) + " flow events ...");
  return Analysed{analysis::analyze(in), in.now_ns};
}

std::optional<Analysed> analyze_native(const std::string& input, const std::string& topology, TimeRange range,
                                       std::string& err) {
  std::string db = store::Store::resolve(input);
  if (!looks_like_sqlite(db)) {
    err = input +
          ": not a netprism recording (expected an aggregator data dir or a file from `netprism record`)";
    return std::nullopt;
  }
  try {
    store::Store s(input, store::Db::Mode::kReadOnly);
    auto addr_node = store::addr_nodes(s.nodes());
    if (!topology.empty() && !analysis::load_topology(topology, addr_node, err)) return std::nullopt;
    std::vector<std::string> warnings;
    bool rdma_counters = false;
    auto r = stream_native(s, addr_node, range, warnings, &rdma_counters);
    if (rdma_counters) {
      // RDMA port counters recorded (counters-only agents): the counters source is analyze()'s
      // (counters.hpp), over the whole recording in memory (such recordings are of RDMA jobs, their bursts
      // per 10 ms).
      analysis::Input in = load_native(s, warnings);
      in.addr_node = addr_node;
      clip(in, range);
      r = Analysed{analysis::analyze(in), in.now_ns};
    }
    progress_done();
    for (const auto& w : warnings) std::cerr << "netprism: warning: " << w << "\n";
    return r;
  } catch (const std::exception& e) {
    err = input + ": " + e.what();
    return std::nullopt;
  }
}

std::optional<nlohmann::json> analyze_file(const std::string& input, std::string format,
                                           const std::string& topology, std::string& err, TimeRange range) {
  auto r = analyze_recording(input, std::move(format), topology, err, range);
  if (!r) return std::nullopt;
  return jobs_document(r->result);
}

nlohmann::json jobs_document(const analysis::Result& r) {
  auto jobs = nlohmann::json::array();
  for (const auto& j : r.jobs) jobs.push_back(analysis::full(j));
  return nlohmann::json{{"jobs", jobs}};
}

std::optional<nlohmann::json> record(const Client& client, const std::string& output, uint64_t since,
                                     uint64_t until, CallError& err) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(output + suffix, ec);
  uint64_t batches = 0, records = 0;
  ProgressLine line;
  try {
    store::Store out(output, store::Db::Mode::kReadWrite);
    int64_t after = 0;
    for (;;) {
      nlohmann::json req = {{"cmd", "dump"}, {"after_id", after}, {"since", since}, {"until", until}};
      auto page = client.call(req, err);
      if (!page) return std::nullopt;
      store::Transaction tx(out.db());
      if (after == 0) {
        for (const auto& n : page->value("nodes", nlohmann::json::array())) {
          store::NodeRow row;
          row.node = n.value("node", "");
          row.epoch = n.value("epoch", uint64_t{0});
          row.hello.node = row.node;
          row.hello.epoch = row.epoch;
          row.hello.agent_version = n.value("agent_version", "");
          for (const auto& i : n.value("interfaces", nlohmann::json::array()))
            row.hello.interfaces.push_back(
                {i.value("name", ""), i.value("ifindex", 0u), i.value("addrs", std::vector<std::string>{})});
          row.registered_ns = n.value("registered_ns", uint64_t{0});
          row.last_seen_ns = n.value("last_seen_ns", uint64_t{0});
          if (!row.node.empty()) out.register_node(row.hello, row.registered_ns);
        }
        store::OwnTraffic own;
        for (const auto& p : page->value("own_ports", nlohmann::json::array()))
          if (p.is_number_unsigned()) own.ports.insert(p.get<uint16_t>());
        store::save_own_traffic(out, own);
      }
      const auto& rows = page->value("batches", nlohmann::json::array());
      for (const auto& b : rows) {
        store::Store::RawRow r{b.value("id", int64_t{0}),           b.value("node", ""),
                               b.value("epoch", uint64_t{0}),       b.value("seq", uint64_t{0}),
                               b.value("received_ns", uint64_t{0}), b.value("first_ns", uint64_t{0}),
                               b.value("last_ns", uint64_t{0}),     b.value("records", uint64_t{0}),
                               b.value("raw_bytes", uint64_t{0}),   {}};
        auto data = unbase64(b.value("data", ""));
        if (!data) {
          err = {CallError::kOther, "aggregator sent a corrupt dump page"};
          return std::nullopt;
        }
        r.data = std::move(*data);
        out.insert_raw(r);
        after = std::max(after, r.id);
        batches++;
        records += r.records;
      }
      tx.commit();
      progress("netprism: record: " + std::to_string(batches) + " batches, " + std::to_string(records) +
               " records copied ...");
      if (rows.empty() || page->value("done", false)) break;
    }
    out.db().exec("PRAGMA journal_mode=DELETE");  // one self-contained file
  } catch (const std::exception& e) {
    err = {CallError::kOther, output + ": " + e.what()};
    return std::nullopt;
  }
  return nlohmann::json{{"file", output}, {"batches", batches}, {"records", records}};
}

}  // namespace netprism::cli
