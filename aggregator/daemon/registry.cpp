#include "registry.hpp"

#include <algorithm>
#include <cctype>

#include "flows.hpp"
#include "log.hpp"

namespace netprism::daemon {

namespace {
// The offset estimate is the minimum of (receive time - agent send time) over the last samples: the minimum
// is the sample with the least queueing delay, so it is the tightest upper bound on the true offset (the
// same filter NTP applies). 64 samples at the agent's ~10 batches/s span several seconds: enough to catch a
// quiet moment, short enough to follow a stepped clock.
constexpr std::size_t kOffsetSamples = 64;
// Distinct rejection reasons kept apart; more go to "other", so hostile input cannot grow this map.
constexpr std::size_t kMaxReasons = 64;

// Reasons carry numbers ("expected 9 fields, got 3"); counting by the text without digits groups them.
std::string reason_class(const std::string& reason) {
  std::string out;
  for (char c : reason.substr(0, 80)) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      if (out.empty() || out.back() != 'N') out += 'N';
    } else {
      out += c;
    }
  }
  return out;
}
}  // namespace

void Registry::load(const std::vector<store::NodeRow>& rows,
                    const std::set<std::pair<std::string, uint64_t>>& epochs) {
  std::lock_guard lk(mu_);
  for (const auto& r : rows) nodes_[r.node].row = r;
  epochs_ = epochs;
}

bool Registry::known(const std::string& node, uint64_t epoch) const {
  std::lock_guard lk(mu_);
  return epochs_.count({node, epoch}) > 0;
}

void Registry::on_hello(const Hello& h, uint64_t now_ns) {
  std::lock_guard lk(mu_);
  auto& n = nodes_[h.node];
  n.row.node = h.node;
  n.row.epoch = h.epoch;
  n.row.hello = h;
  n.row.registered_ns = now_ns;
  n.row.last_seen_ns = now_ns;
  epochs_.emplace(h.node, h.epoch);
  counters_.hellos++;
}

int64_t Registry::on_seen(const std::string& node, uint64_t sent_ns, uint64_t now_ns,
                          const Counters* counters, uint64_t add_records) {
  std::lock_guard lk(mu_);
  auto& n = nodes_[node];
  n.row.node = node;
  n.row.last_seen_ns = std::max(n.row.last_seen_ns, now_ns);
  n.row.records += add_records;
  if (counters) n.row.counters = *counters;
  n.offset_samples.push_back(static_cast<int64_t>(now_ns) - static_cast<int64_t>(sent_ns));
  if (n.offset_samples.size() > kOffsetSamples) n.offset_samples.pop_front();
  int64_t est = *std::min_element(n.offset_samples.begin(), n.offset_samples.end());
  n.row.clock_offset_ns = est;
  n.lag_ns = n.offset_samples.back() - est;
  return est;
}

void Registry::count_reject(const std::string& reason) {
  std::lock_guard lk(mu_);
  counters_.rejected++;
  auto key = reason_class(reason);
  if (!counters_.rejected_by_reason.count(key) && counters_.rejected_by_reason.size() >= kMaxReasons)
    key = "other";
  counters_.rejected_by_reason[key]++;
}

void Registry::count_deferred(const std::string& peer, uint64_t messages, uint64_t bytes) {
  std::lock_guard lk(mu_);
  counters_.deferred += messages;
  counters_.deferred_bytes += bytes;
  auto key = peer.empty() ? std::string("plain") : peer.substr(0, 80);
  if (!counters_.deferred_by_peer.count(key) && counters_.deferred_by_peer.size() >= kMaxReasons)
    key = "other";
  counters_.deferred_by_peer[key] += messages;
}

void Registry::count_cut(const std::string& peer, uint64_t connections_shut) {
  std::lock_guard lk(mu_);
  counters_.cut++;
  counters_.cut_connections += connections_shut;
  auto key = peer.substr(0, 80);
  if (!counters_.cut_by_peer.count(key) && counters_.cut_by_peer.size() >= kMaxReasons) key = "other";
  counters_.cut_by_peer[key]++;
}

bool Registry::has_node(const std::string& node) const {
  std::lock_guard lk(mu_);
  return nodes_.count(node) > 0;
}

std::size_t Registry::node_count() const {
  std::lock_guard lk(mu_);
  return nodes_.size();
}

nlohmann::json Registry::status(uint64_t now_ns, uint64_t connected_timeout_ns) const {
  std::lock_guard lk(mu_);
  auto agents = nlohmann::json::array();
  uint64_t total = 0;
  for (const auto& [name, n] : nodes_) {
    const auto& r = n.row;
    total += r.records;
    nlohmann::json ifaces = nlohmann::json::array();
    for (const auto& i : r.hello.interfaces)
      ifaces.push_back({{"name", i.name}, {"ifindex", i.ifindex}, {"addrs", i.addrs}});
    nlohmann::json a = {{"node", name},
                        {"connected", r.last_seen_ns + connected_timeout_ns >= now_ns &&
                                          r.last_seen_ns <= now_ns + connected_timeout_ns},
                        {"last_seen_ns", r.last_seen_ns},
                        {"records", r.records},
                        {"epoch", r.epoch},
                        {"agent_version", r.hello.agent_version},
                        {"interfaces", ifaces},
                        {"clock",
                         {{"source", r.hello.clock.source},
                          {"synced", r.hello.clock.synced},
                          {"est_error_ns", r.hello.clock.est_error_ns}}},
                        {"counters", r.counters}};
    a["clock_offset_ns"] = r.clock_offset_ns ? nlohmann::json(*r.clock_offset_ns) : nlohmann::json(nullptr);
    a["lag_ns"] = n.lag_ns;
    agents.push_back(std::move(a));
  }
  const auto& c = counters_;
  nlohmann::json ingest = {{"messages", c.messages},
                           {"hellos", c.hellos},
                           {"batches_stored", c.batches_stored},
                           {"duplicates", c.duplicates},
                           {"unknown_node", c.unknown_node},
                           {"heartbeats", c.heartbeats},
                           {"rejected", c.rejected},
                           {"rejected_by_reason", c.rejected_by_reason},
                           {"deferred", c.deferred},
                           {"deferred_bytes", c.deferred_bytes},
                           {"deferred_by_peer", c.deferred_by_peer},
                           {"nodes_refused", c.nodes_refused},
                           {"cut", c.cut},
                           {"cut_connections", c.cut_connections},
                           {"cut_by_peer", c.cut_by_peer},
                           {"commit_failures", c.commit_failures},
                           {"records_stored", c.records_stored},
                           {"commits", c.commits},
                           {"commit_seconds_sum", c.commit_seconds_sum},
                           {"last_commit_latency_ns", c.last_commit_latency_ns},
                           {"retention_deleted_batches", c.retention_deleted}};
  // Failing: the last commit failed, or one did within the recovery time (see on_commit).
  bool failing = c.failing_since_ns != 0 &&
                 (c.last_failure_ns >= c.last_success_ns || now_ns < c.last_failure_ns + kCommitRecoveryNs);
  nlohmann::json store = {
      {"batches", c.store_batches}, {"compressed_bytes", c.store_bytes}, {"commit_failing", failing}};
  if (failing) {
    store["failing_since_ns"] = c.failing_since_ns;
    store["failing_commits"] = c.failing_commits;
    store["last_error"] = c.last_commit_error;
  }
  nlohmann::json doc = {{"agents", agents},
                        {"records_total", total},
                        {"ingest", ingest},
                        {"store", std::move(store)},
                        {"now_ns", now_ns}};
  if (const auto& ch = c.clickhouse; ch.enabled)
    doc["clickhouse"] = {{"sunk_batches", ch.batches},        {"sunk_rows", ch.rows},
                         {"already_there", ch.already_there}, {"sunk_rdma_rows", ch.rdma_rows},
                         {"pending_batches", ch.pending},     {"errors", ch.errors},
                         {"high_water_mark", ch.hwm},         {"last_success_ns", ch.last_success_ns},
                         {"last_error", ch.last_error}};
  if (const auto& an = c.clickhouse_analyzer; an.enabled)
    doc["clickhouse_analyzer"] = {{"shard", an.shard},          {"nodes", an.nodes},
                                  {"polls", an.polls},          {"rows", an.rows},
                                  {"rows_read", an.rows_read},  {"band_rows", an.band_rows},
                                  {"errors", an.errors},        {"last_success_ns", an.last_success_ns},
                                  {"last_error", an.last_error}};
  return doc;
}

std::string Registry::on_commit(bool ok, const std::string& error, std::size_t messages, uint64_t now_ns) {
  std::lock_guard lk(mu_);
  auto& c = counters_;
  if (ok) {
    c.last_success_ns = now_ns;
    if (const uint64_t end = now_unix_ns(); end >= now_ns) {
      c.commits++;
      c.last_commit_latency_ns = end - now_ns;
      c.commit_seconds_sum += static_cast<double>(end - now_ns) / 1e9;
    }
    if (!c.failing_since_ns || now_ns < c.last_failure_ns + kCommitRecoveryNs) return "";
    std::string line = "store commits succeed again after " + std::to_string(c.failing_commits) +
                       " failed ones; the agents have resent what was not acknowledged";
    c.failing_since_ns = 0;
    c.failing_commits = 0;
    c.last_commit_error.clear();
    return line;
  }
  c.commit_failures++;
  c.last_failure_ns = now_ns;
  if (!c.failing_since_ns) c.failing_since_ns = now_ns ? now_ns : 1;
  c.last_commit_error = error;
  if (c.failing_commits++ % kCommitFailureLogEvery != 0) return "";
  return "store commit failed, " + std::to_string(messages) +
         " messages left unacknowledged (the agents keep and resend them): " + error + " (" +
         std::to_string(c.failing_commits) + " failed commits in this failing period" +
         (c.failing_commits > 1 ? "; logged every " + std::to_string(kCommitFailureLogEvery) + "th" : "") +
         ")";
}

std::map<std::string, std::string> Registry::addr_nodes() const {
  std::lock_guard lk(mu_);
  std::vector<store::NodeRow> rows;
  for (const auto& [_, n] : nodes_) rows.push_back(n.row);
  return store::addr_nodes(rows);
}

}  // namespace netprism::daemon
