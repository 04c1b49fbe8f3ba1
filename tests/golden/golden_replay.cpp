// Golden-output driver for the live (streaming) analysis: feeds a recording's events to StreamingAnalysis
// in the order agents deliver them (by end time), one pass per second of traffic as the daemon does, and
// prints what every pass saw (jobs, states, iteration and finding counts) and the last pass' full jobs.
// The output is deterministic (no wall clock), so a committed copy pins the live path byte for byte.
//   golden_replay INPUT [--format csv|native|rdma-counters] [--topology FILE]
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
  if (format == "csv" || format == "rdma-counters") {
    std::string err;
    auto in = format == "csv" ? analysis::load_csv(input, topo, err)
                              : analysis::load_rdma_counters(input, topo, err);
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

// The daemon's feed (live_analysis.cpp) over a recording: events by end time, QP table rows by read time,
// RDMA port bursts by end time, each up to the pass' time, then what QpTeardowns and LiveCounters make of
// them, then the pass. Recordings without RDMA records are replayed exactly as before they existed.
class Replay {
 public:
  explicit Replay(analysis::Input& in) : in_(in) {
    auto by = [](auto key) { return [key](const auto& a, const auto& b) { return key(a) < key(b); }; };
    std::stable_sort(in_.events.begin(), in_.events.end(), by([](const auto& e) { return e.last_ns; }));
    std::stable_sort(in_.qps.begin(), in_.qps.end(), by([](const auto& q) { return q.seen_ns; }));
    std::stable_sort(in_.rdma_bursts.begin(), in_.rdma_bursts.end(),
                     by([](const auto& b) { return b.burst.last_ns; }));
    sa_.set_addr_nodes(in_.addr_node);
    sa_.set_fabric(in_.fabric);
    sa_.set_rdma_sources(!in_.qps.empty() || !in_.rdma_bursts.empty());
  }
  bool done() const {
    return e_ == in_.events.size() && q_ == in_.qps.size() && b_ == in_.rdma_bursts.size();
  }
  uint64_t first() const {
    uint64_t t = UINT64_MAX;
    if (!in_.events.empty()) t = std::min(t, in_.events.front().last_ns);
    if (!in_.qps.empty()) t = std::min(t, in_.qps.front().seen_ns);
    if (!in_.rdma_bursts.empty()) t = std::min(t, in_.rdma_bursts.front().burst.last_ns);
    return t;
  }
  // When the last pass runs: half a second after the last event, or once the last table read and (with
  // port counters) the last burst's segment have been taken.
  uint64_t end() const {
    uint64_t t = in_.events.empty() ? 0 : in_.events.back().last_ns + kSec / 2;
    for (const auto& q : in_.qps) t = std::max(t, q.seen_ns);
    for (const auto& [node, ns] : in_.qp_read_ns) t = std::max(t, ns);
    if (!in_.rdma_bursts.empty()) t = std::max(t, in_.rdma_bursts.back().burst.last_ns + 2 * kSec);
    return t;
  }
  analysis::Result pass(uint64_t t) {
    for (; e_ < in_.events.size() && in_.events[e_].last_ns <= t; ++e_) {
      analysis::add_event(sa_, in_.events[e_]);
      td_.flow(in_.events[e_]);
      counters_.probe_flow(in_.events[e_]);
    }
    for (; q_ < in_.qps.size() && in_.qps[q_].seen_ns <= t; ++q_) {
      td_.qp_row(in_.qps[q_].node, in_.qps[q_].seen_ns, in_.qps[q_].qp);
      counters_.qp_row(in_.qps[q_].node, in_.qps[q_].seen_ns, in_.qps[q_].qp);
    }
    for (const auto& [node, ns] : in_.qp_read_ns)
      if (ns <= t) td_.table_read(node, ns), counters_.table_read(node, ns);
    for (; b_ < in_.rdma_bursts.size() && in_.rdma_bursts[b_].burst.last_ns <= t; ++b_)
      counters_.burst(in_.rdma_bursts[b_].node, in_.rdma_bursts[b_].burst);
    for (const auto& e : td_.take(in_.addr_node, 0)) analysis::add_event(sa_, e);
    if (!counters_.empty())
      for (const auto& e : counters_.take(t, in_.addr_node)) analysis::add_event(sa_, e);
    return sa_.pass(t);
  }

 private:
  analysis::Input& in_;
  analysis::StreamingAnalysis sa_;
  analysis::QpTeardowns td_;
  analysis::LiveCounters counters_;
  size_t e_ = 0, q_ = 0, b_ = 0;
};

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
  if (input.empty() || (format != "csv" && format != "native" && format != "rdma-counters")) {
    std::cerr << "usage: golden_replay INPUT [--format csv|native|rdma-counters] [--topology FILE]\n";
    return 2;
  }
  auto in = load(input, format, topo);
  if (!in) return 1;
  Replay r(*in);
  nlohmann::json passes = nlohmann::json::array();
  if (r.done()) {
    std::cout << nlohmann::json{{"passes", passes}, {"jobs", nlohmann::json::array()}}.dump(1) << "\n";
    return 0;
  }
  for (uint64_t t = r.first() + kSec; !r.done(); t += kSec) passes.push_back(pass_summary(t, r.pass(t)));
  auto last = r.pass(r.end());
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& j : last.jobs) jobs.push_back(analysis::full(j));
  std::cout << nlohmann::json{{"passes", passes}, {"jobs", jobs}}.dump(1) << "\n";
  return 0;
}
