// Golden-output driver for the live (streaming) analysis: feeds a recording's events to StreamingAnalysis
// in the order agents deliver them (by end time), one pass per second of traffic as the daemon does, and
// prints what every pass saw (jobs, states, iteration and finding counts) and the last pass' full jobs.
// The output is deterministic (no wall clock), so a committed copy pins the live path byte for byte.
//   golden_replay INPUT [--format csv|native] [--topology FILE]
#include <algorithm>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "analysis.hpp"
#include "counters.hpp"
#include "feed.hpp"
#include "incremental.hpp"
#include "offline.hpp"
#include "store.hpp"

using namespace netprism;

namespace {

constexpr uint64_t kSec = 1'000'000'000ull;

std::optional<analysis::Input> load(const std::string& input, const std::string& format,
                                    const std::string& topo) {
  if (format == "csv") {
    std::string err;
    auto in = analysis::load_csv(input, topo, err);
    if (!in) std::cerr << "golden_replay: " << err << "\n";
    return in;
  }
  store::Store s(input, store::Db::Mode::kReadOnly);
  std::vector<std::string> warnings;
  auto in = cli::load_native(s, warnings);
  for (const auto& w : warnings) std::cerr << "golden_replay: warning: " << w << "\n";
  return in;
}

nlohmann::json pass_summary(uint64_t t, const analysis::Result& r) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& j : r.jobs)
    jobs.push_back({{"id", j.id},
                    {"state", j.state},
                    {"nodes", j.nodes.size()},
                    {"iterations", j.iterations.size()},
                    {"findings", j.findings.size()}});
  return {{"t", t}, {"jobs", jobs}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, format = "csv", topo;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--format" && i + 1 < argc)
      format = argv[++i];
    else if (a == "--topology" && i + 1 < argc)
      topo = argv[++i];
    else
      input = a;
  }
  if (input.empty() || (format != "csv" && format != "native")) {
    std::cerr << "usage: golden_replay INPUT [--format csv|native] [--topology FILE]\n";
    return 2;
  }
  auto in = load(input, format, topo);
  if (!in) return 1;
  if (in->events.empty()) {
    std::cout << nlohmann::json{{"passes", nlohmann::json::array()}, {"jobs", nlohmann::json::array()}}.dump(
                     1)
              << "\n";
    return 0;
  }
  std::stable_sort(in->events.begin(), in->events.end(),
                   [](const auto& a, const auto& b) { return a.last_ns < b.last_ns; });
  analysis::StreamingAnalysis sa;
  sa.set_addr_nodes(in->addr_node);
  sa.set_fabric(in->fabric);
  // QP table reads (RDMA agents) as the daemon takes them (live_analysis.cpp): rows by read time, the
  // teardown events they give added before each pass. Recordings without QP rows are replayed as before.
  std::stable_sort(in->qps.begin(), in->qps.end(),
                   [](const auto& a, const auto& b) { return a.seen_ns < b.seen_ns; });
  analysis::QpTeardowns td;
  size_t q = 0;
  uint64_t last_read = 0;
  for (const auto& r : in->qps) last_read = std::max(last_read, r.seen_ns);
  for (const auto& [node, ns] : in->qp_read_ns) last_read = std::max(last_read, ns);
  auto tables = [&](uint64_t t) {
    for (; q < in->qps.size() && in->qps[q].seen_ns <= t; ++q)
      td.qp_row(in->qps[q].node, in->qps[q].seen_ns, in->qps[q].qp);
    for (const auto& [node, ns] : in->qp_read_ns)
      if (ns <= t) td.table_read(node, ns);
    for (const auto& e : td.take(in->addr_node, 0)) analysis::add_event(sa, e);
  };
  nlohmann::json passes = nlohmann::json::array();
  uint64_t t = in->events.front().last_ns + kSec;
  for (size_t i = 0; i < in->events.size(); t += kSec) {
    for (; i < in->events.size() && in->events[i].last_ns <= t; ++i) {
      analysis::add_event(sa, in->events[i]);
      td.flow(in->events[i]);
    }
    tables(t);
    passes.push_back(pass_summary(t, sa.pass(t)));
  }
  const uint64_t end = std::max(in->events.back().last_ns + kSec / 2, last_read);
  tables(end);
  auto last = sa.pass(end);
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& j : last.jobs) jobs.push_back(analysis::full(j));
  std::cout << nlohmann::json{{"passes", passes}, {"jobs", jobs}}.dump(1) << "\n";
  return 0;
}
