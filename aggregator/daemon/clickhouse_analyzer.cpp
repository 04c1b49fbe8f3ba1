#include "clickhouse_analyzer.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "analysis/topology.hpp"
#include "log.hpp"
#include "stoppable_sleep.hpp"

namespace netprism::daemon {

namespace {
// The shard's nodes are recomputed this often: a GROUP BY over the window's flowlets (who talked to whom),
// the one read of a round that grows with the window rather than with new rows. A new job's first 5 s
// show up that much later on a sharded analyser.
constexpr uint64_t kShardEveryNs = 5'000'000'000ull;
// A node's run of flowlets is handed over at this size: bounds the analyzer's own buffer.
constexpr std::size_t kRunFlowlets = 65'536;
// Flowlets a live aggregator keeps beyond the window (they end after it began): rows are followed while
// their first_ns is at most the window plus this before their insert. Agents cut a flowlet at max_burst
// (100 ms by default, bpf/burst.h); switch exporters' flows end at their active timeout (commonly <= 60 s).
constexpr uint64_t kReachSlackNs = 60'000'000'000ull;

clickhouse::Follower::Options follow_options(const Settings& s) {
  clickhouse::Follower::Options o;
  o.reach_ns = static_cast<uint64_t>(s.analysis_window_s) * 1'000'000'000ull + kReachSlackNs;
  o.lag_s = static_cast<uint32_t>(s.clickhouse_lag_s);
  return o;
}

}  // namespace

std::map<std::string, std::string> ClickHouseAnalyzer::Names::get() const {
  std::lock_guard lk(mu_);
  return m_;
}

void ClickHouseAnalyzer::Names::set(std::map<std::string, std::string> m) {
  std::lock_guard lk(mu_);
  m_ = std::move(m);
}

ClickHouseAnalyzer::ClickHouseAnalyzer(const Settings& s, Registry& reg, LiveAnalysis& live, Names& names)
    : s_(s),
      reg_(reg),
      live_(live),
      names_(names),
      reader_(clickhouse::parse_checked_url(s.clickhouse_analyze_from, "--analyze-from-clickhouse")),
      follower_(clickhouse::parse_checked_url(s.clickhouse_analyze_from, "--analyze-from-clickhouse"),
                follow_options(s)),
      rdma_follower_(clickhouse::parse_checked_url(s.clickhouse_analyze_from, "--analyze-from-clickhouse"),
                     follow_options(s)) {
  std::string err;
  if (!s.clickhouse_shard.empty()) shard_ = *clickhouse::parse_shard(s.clickhouse_shard, err);
  reg_.with_counters([&](IngestCounters& c) {
    c.clickhouse_analyzer.enabled = true;
    c.clickhouse_analyzer.shard = s.clickhouse_shard;
  });
}

void ClickHouseAnalyzer::run(std::stop_token st) {
  ::pthread_setname_np(::pthread_self(), "np-ch-analyzer");
  log_line("analysing every aggregator's flowlets from " + s_.clickhouse_analyze_from +
           (s_.clickhouse_shard.empty() ? "" : ", shard " + s_.clickhouse_shard));
  std::chrono::milliseconds backoff{0};
  bool failing = false;
  while (!st.stop_requested()) {
    std::string err;
    bool ok = false;
    try {
      ok = round(st, err);
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (ok) {
      if (failing) log_line("clickhouse analyzer: reading again");
      failing = false;
      backoff = std::chrono::milliseconds(0);
      nap(st, std::chrono::milliseconds(s_.analysis_interval_ms));
      continue;
    }
    if (!failing) log_at(Level::kWarning, "clickhouse analyzer: " + err + " (retrying with backoff)");
    failing = true;
    reg_.with_counters([&](IngestCounters& c) {
      c.clickhouse_analyzer.errors++;
      c.clickhouse_analyzer.last_error = err;
    });
    backoff = std::clamp(backoff * 2, std::chrono::milliseconds(250), std::chrono::milliseconds(10'000));
    nap(st, backoff);
  }
}

bool ClickHouseAnalyzer::refresh_names(std::string& err) {
  auto addrs = reader_.node_addrs(err);
  if (!addrs) return false;
  auto ports = reader_.own_ports(err);
  if (!ports) return false;
  addr_node_ = store::addr_nodes(*addrs);
  if (!s_.topology.empty() && !analysis::load_topology(s_.topology, addr_node_, err)) return false;
  names_.set(addr_node_);
  own_.ports = std::move(*ports);
  return true;
}

bool ClickHouseAnalyzer::shard_nodes(std::vector<std::string>& nodes, std::vector<std::string>& added,
                                     std::string& err) {
  const uint64_t now = now_unix_ns();
  if (now >= next_shard_ns_) {
    const uint64_t window = static_cast<uint64_t>(s_.analysis_window_s) * 1'000'000'000ull;
    std::vector<std::string> all;
    auto mine = clickhouse::shard_nodes(reader_, now > window ? now - window : 0, UINT64_MAX, addr_node_,
                                        shard_, err, &all);
    if (!mine) return false;
    // Mine now, and those mine before that still have traffic in the window (their data is in the analysis).
    std::vector<std::string> kept;
    std::set_intersection(owned_.begin(), owned_.end(), all.begin(), all.end(), std::back_inserter(kept));
    shard_view_.clear();
    std::set_union(mine->begin(), mine->end(), kept.begin(), kept.end(), std::back_inserter(shard_view_));
    next_shard_ns_ = now + kShardEveryNs;
  }
  nodes = shard_view_;
  // Relative to the last successful round: a failed round's new nodes are read again in the next.
  std::set_difference(nodes.begin(), nodes.end(), owned_.begin(), owned_.end(), std::back_inserter(added));
  return true;
}

bool ClickHouseAnalyzer::round(std::stop_token st, std::string& err) {
  if (!refresh_names(err)) return false;
  std::vector<std::string> nodes, added;
  const bool sharded = shard_.count > 1;
  if (sharded && !shard_nodes(nodes, added, err)) return false;
  if (sharded && nodes.empty()) return true;  // no job of this shard yet ("no nodes" would read all)
  // RDMA records first, so a round's flowlets of RoCE flows meet their QP tables (live_analysis.cpp).
  // A poll's RDMA records go to the analysis together: the counters source cuts the port series at quiet
  // instants of what it holds (counters_live.cpp), so a pass seeing half a poll would cut inside activity.
  std::vector<Batch> rdma_batches;
  clickhouse::RdmaRows rdma([&](Batch&& b) { rdma_batches.push_back(std::move(b)); });
  if (!rdma_follower_.poll(nodes, added, rdma, err)) return false;
  live_.feed_rdma(std::move(rdma_batches));
  clickhouse::FlowletRows rows([&](const clickhouse::FlowletRow& row) { take(st, row); });
  const bool ok = follower_.poll(nodes, added, rows, err);
  flush(st);
  if (!ok) return false;
  if (sharded && !added.empty())
    log_line("clickhouse analyzer: " + std::to_string(added.size()) + " node(s) joined shard " +
             s_.clickhouse_shard);
  owned_ = std::move(nodes);
  const auto& fs = follower_.stats();
  reg_.with_counters([&](IngestCounters& c) {
    auto& an = c.clickhouse_analyzer;
    an.nodes = sharded ? static_cast<int64_t>(owned_.size()) : -1;
    an.polls = fs.polls;
    an.rows = fs.rows;
    an.rows_read = fs.rows_read;
    an.band_rows = fs.band_rows;
    an.last_success_ns = now_unix_ns();
    an.last_error.clear();
  });
  return true;
}

void ClickHouseAnalyzer::take(std::stop_token st, const clickhouse::FlowletRow& row) {
  if (own_.matches(row.f)) return;  // netprism's own traffic, as every aggregator's analysis leaves it out
  if (row.node != run_node_ || run_.size() >= kRunFlowlets) {
    flush(st);
    run_node_ = row.node;
  }
  run_.push_back(row.f);
}

void ClickHouseAnalyzer::flush(std::stop_token st) {
  if (run_.empty()) return;
  // The analysis is behind: wait for its next pass to take the queue (the thread reads no further meanwhile).
  while (!live_.feed_flowlets(run_node_, run_) && !st.stop_requested())
    nap(st, std::chrono::milliseconds(50));
  run_.clear();
}

}  // namespace netprism::daemon
