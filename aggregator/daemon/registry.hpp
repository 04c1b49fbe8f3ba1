// What the ingest thread knows about agents and about its own health, shared with the query thread.
// Registrations are loaded from the store at start (they persist across restarts); everything else here is
// a live view the query thread reads under the mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "store.hpp"

namespace netprism::daemon {

struct IngestCounters {
  uint64_t messages = 0;
  uint64_t hellos = 0;
  uint64_t batches_stored = 0;
  uint64_t duplicates = 0;
  uint64_t unknown_node = 0;
  uint64_t heartbeats = 0;
  uint64_t rejected = 0;
  uint64_t commit_failures = 0;
  // The store's health as the committer last saw it: a streak of failed commits (a full disk, a read-only
  // or vanished data dir) and its first and last error. Nothing is acknowledged meanwhile, so the agents keep
  // their batches; `status` says so instead of leaving operators to find it in the log.
  uint64_t failing_since_ns = 0;  // 0: healthy (see Registry::on_commit)
  uint64_t failing_commits = 0;   // failed commits since then
  uint64_t last_failure_ns = 0, last_success_ns = 0;
  std::string last_commit_error;
  // Successful commits and their latency (the group's apply + commit, from its start to the commit's end).
  uint64_t commits = 0;
  double commit_seconds_sum = 0;
  uint64_t last_commit_latency_ns = 0;
  uint64_t records_stored = 0;
  uint64_t retention_deleted = 0;
  uint64_t store_batches = 0;  // running totals of the store (counted once at start, then kept up to date)
  uint64_t store_bytes = 0;
  std::map<std::string, uint64_t> rejected_by_reason;  // bounded: see Registry::count_reject
  // The ClickHouse sink (daemon/clickhouse_sink.hpp), with --clickhouse only.
  struct ClickHouse {
    bool enabled = false;
    uint64_t batches = 0, rows = 0;  // sunk by this run
    uint64_t already_there = 0;      // found in ClickHouse when re-checked after a failure (not re-inserted)
    uint64_t rdma_rows = 0;          // rows of the rdma table (batches with RDMA records) inserted
    uint64_t pending = 0;            // committed batches not yet in ClickHouse
    uint64_t errors = 0, hwm = 0, last_success_ns = 0;
    std::string last_error;  // of the current failure streak; "" when the last attempt succeeded
  } clickhouse;
  // The analysis role (daemon/clickhouse_analyzer.hpp), with --analyze-from-clickhouse only.
  struct ClickHouseAnalyzer {
    bool enabled = false;
    std::string shard;             // "K/N", "" for all jobs
    int64_t nodes = -1;            // nodes of this shard's jobs (-1: unsharded, every node)
    uint64_t polls = 0, rows = 0;  // rows handed to the analysis
    uint64_t rows_read = 0;        // rows read (more than rows: re-read in the lag band)
    uint64_t band_rows = 0;        // rows remembered for dedup
    uint64_t errors = 0, last_success_ns = 0;
    std::string last_error;
  } clickhouse_analyzer;
  // Messages over their sender's byte budget (Settings::peer_bytes_per_s) or too large for the pipeline's
  // room (one large message at a time, ingest.cpp): not decoded, not acknowledged (the sender resends). By
  // sender (the key's node, "plain" on plain TCP); bounded like the reasons.
  uint64_t deferred = 0, deferred_bytes = 0;
  std::map<std::string, uint64_t> deferred_by_peer;
  uint64_t nodes_refused = 0;  // HELLOs of new nodes beyond Settings::max_nodes
  // Keys cut at the transport for flooding (peer_cut.hpp): cuts, live connections shut; cuts by node
  // (bounded like the reasons).
  uint64_t cut = 0, cut_connections = 0;
  std::map<std::string, uint64_t> cut_by_peer;
};

class Registry {
 public:
  void load(const std::vector<store::NodeRow>& rows,
            const std::set<std::pair<std::string, uint64_t>>& epochs);

  bool known(const std::string& node, uint64_t epoch) const;
  void on_hello(const Hello& h, uint64_t now_ns);
  // A message from the agent: updates last-seen, counters and the clock-offset estimate.
  // Returns the current offset estimate (aggregator clock minus agent clock, upper bound).
  int64_t on_seen(const std::string& node, uint64_t sent_ns, uint64_t now_ns, const Counters* counters,
                  uint64_t add_records);
  void count_reject(const std::string& reason);
  void count_deferred(const std::string& peer, uint64_t messages, uint64_t bytes);
  void count_cut(const std::string& peer, uint64_t connections_shut);
  bool has_node(const std::string& node) const;
  std::size_t node_count() const;
  // One commit's outcome; now_ns: when the group's processing began (its latency is measured from there).
  // Returns the log line to write, or "" when this one is not worth a line. A failure starts a failing
  // period; it ends with the first successful commit kCommitRecoveryNs after the last failure: a nearly full
  // disk lets commits through between failures (a checkpoint frees WAL space), and without that hysteresis
  // every such flap would log twice. The period's first failure, every kCommitFailureLogEvery-th after it (a
  // full disk fails several commits per second) and its end are logged; commit_failures counts every one.
  std::string on_commit(bool ok, const std::string& error, std::size_t messages, uint64_t now_ns);
  static constexpr uint64_t kCommitFailureLogEvery = 100;
  static constexpr uint64_t kCommitRecoveryNs = 5'000'000'000ull;
  template <class Fn>
  void with_counters(Fn&& fn) {
    std::lock_guard lk(mu_);
    fn(counters_);
  }

  // `status` document. connected: seen within connected_timeout_ns.
  nlohmann::json status(uint64_t now_ns, uint64_t connected_timeout_ns) const;
  std::map<std::string, std::string> addr_nodes() const;

 private:
  struct Node {
    store::NodeRow row;
    std::deque<int64_t> offset_samples;
    // The last message's delay beyond the best one seen (its send-to-receipt time minus the offset
    // estimate): queueing in the agent, the network and ingest; the `ingest lagging` alert watches it.
    int64_t lag_ns = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Node> nodes_;
  std::set<std::pair<std::string, uint64_t>> epochs_;
  IngestCounters counters_;
};

}  // namespace netprism::daemon
