#include "metrics.hpp"

#include <algorithm>
#include <map>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "netprism/version.hpp"

namespace netprism::daemon {

namespace {

using nlohmann::json;
using prometheus::Labels;

// Every job gets a series per kind, 0 when it has none, so a dashboard shows a finding go away.
constexpr const char* kFindingKinds[] = {"straggler", "slow_link", "slow_iteration", "hang", "fabric"};
constexpr const char* kJobStates[] = {"running", "idle", "hung", "ended"};

double num(const json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_number() ? it->get<double>() : 0.0;
}

// One scrape's registry with short-hand builders: every family is rebuilt from the documents each scrape,
// so a counter is "incremented" once by its current total.
class Builder {
 public:
  prometheus::Family<prometheus::Gauge>& gauge(const std::string& name, const std::string& help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(reg_);
  }
  prometheus::Family<prometheus::Counter>& counter(const std::string& name, const std::string& help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(reg_);
  }
  void set(const std::string& name, const std::string& help, double v, const Labels& l = {}) {
    gauge(name, help).Add(l).Set(v);
  }
  void total(const std::string& name, const std::string& help, double v, const Labels& l = {}) {
    counter(name, help).Add(l).Increment(std::max(0.0, v));
  }
  std::vector<prometheus::MetricFamily> collect() const { return reg_.Collect(); }

 private:
  prometheus::Registry reg_;
};

void ingest_metrics(Builder& b, const json& st) {
  const json in = st.value("ingest", json::object());
  const std::pair<const char*, const char*> totals[] = {
      {"messages", "messages received from agents"},
      {"hellos", "agent registrations (HELLO)"},
      {"batches_stored", "batches stored"},
      {"records_stored", "flow records stored"},
      {"duplicates", "batches received again after they were stored (agent resends)"},
      {"unknown_node", "messages from agents that had not registered"},
      {"heartbeats", "agent heartbeats"},
      {"commit_failures", "store commits that failed (nothing of them acknowledged)"},
      {"deferred", "messages over their sender's byte budget: not decoded, not acknowledged (resent)"},
      {"deferred_bytes", "bytes of messages over their sender's byte budget"},
      {"nodes_refused", "HELLOs of new nodes refused at the registered-node cap (max_nodes)"},
      {"cut", "keys cut at the transport for flooding (deferred data beyond peer_cut_bytes)"},
      {"cut_connections", "live connections shut when their key was cut"},
      {"retention_deleted_batches", "batches deleted by retention"}};
  for (const auto& [key, help] : totals) {
    std::string name = key == std::string("batches_stored")   ? "batches"
                       : key == std::string("records_stored") ? "records"
                                                              : key;
    b.total("netprism_ingest_" + name + "_total", help, num(in, key));
  }
  auto& rejected = b.counter("netprism_ingest_rejected_total", "malformed messages rejected, by reason");
  rejected.Add({{"reason", "all"}}).Increment(num(in, "rejected"));
  const json reasons = in.value("rejected_by_reason", json::object());  // items() needs a live object
  for (const auto& [reason, n] : reasons.items())
    rejected.Add({{"reason", reason}}).Increment(n.is_number() ? n.get<double>() : 0.0);
  if (const json au = st.value("auth", json::object()); !au.empty()) {  // with CURVE only
    b.total("netprism_auth_denied_total", "connections refused: key not in the allowlist",
            num(au, "denied_connections"));
    b.total("netprism_auth_cut_refused_total", "connections refused: their key is cut for flooding",
            num(au, "cut_refused_connections"));
    b.set("netprism_auth_cut_active", "keys refused right now for flooding", num(au, "cut_active"));
  }
  b.total("netprism_ingest_commits_total", "successful store commits", num(in, "commits"));
  b.total("netprism_ingest_commit_seconds_total", "time spent applying and committing message groups",
          num(in, "commit_seconds_sum"));
  b.set("netprism_ingest_last_commit_seconds", "latency of the last commit (group apply + fsync)",
        num(in, "last_commit_latency_ns") / 1e9);

  const json store = st.value("store", json::object());
  b.set("netprism_store_bytes", "compressed bytes of stored batches", num(store, "compressed_bytes"));
  b.set("netprism_store_batches", "stored batches", num(store, "batches"));
  b.set("netprism_store_commit_failing", "1 while store commits fail (full disk, read-only data dir)",
        store.value("commit_failing", false) ? 1 : 0);

  if (const json ch = st.value("clickhouse", json::object()); !ch.empty()) {  // --clickhouse only
    b.total("netprism_clickhouse_batches_total", "batches copied into ClickHouse", num(ch, "sunk_batches"));
    b.total("netprism_clickhouse_rows_total", "flowlet rows copied into ClickHouse", num(ch, "sunk_rows"));
    b.total("netprism_clickhouse_errors_total", "failed ClickHouse rounds (retried)", num(ch, "errors"));
    b.set("netprism_clickhouse_pending_batches", "stored batches not yet in ClickHouse",
          num(ch, "pending_batches"));
  }
  if (const json ca = st.value("clickhouse_analyzer", json::object()); !ca.empty()) {  // the analysis role
    b.total("netprism_clickhouse_analyzer_rows_total", "flowlet rows read from ClickHouse into the analysis",
            num(ca, "rows"));
    b.total("netprism_clickhouse_analyzer_errors_total", "failed reads of ClickHouse (retried)",
            num(ca, "errors"));
    b.set("netprism_clickhouse_analyzer_last_success_timestamp_seconds",
          "when the analysis role last read ClickHouse (0: not yet)", num(ca, "last_success_ns") / 1e9);
  }

  const json an = st.value("analysis", json::object());
  b.set("netprism_analysis_pass_seconds", "duration of the last live analysis pass",
        num(an, "took_ms") / 1e3);
  b.set("netprism_analysis_last_pass_timestamp_seconds", "when the last analysis pass ran (0: none yet)",
        num(an, "last_run_ns") / 1e9);
  b.set("netprism_analysis_window_events", "transfers kept by the live analysis", num(an, "window_events"));
  b.total("netprism_analysis_dropped_events_total", "events the live analysis shed, all causes",
          num(an, "dropped_events"));
  // The same events by cause (their sum is the total above): a separate family, so that sum() over it
  // does not count them twice.
  auto& by_cause = b.counter("netprism_analysis_dropped_events_by_cause_total",
                             "events the live analysis shed, by cause (queue_full, conn_table_full, "
                             "xfer_bound, undecodable)");
  const json causes = an.value("dropped_by_cause", json::object());  // items() needs a live object
  for (const auto& [cause, n] : causes.items())
    by_cause.Add({{"cause", cause}}).Increment(n.is_number() ? std::max(0.0, n.get<double>()) : 0.0);
}

// Agent counters relayed from HEARTBEATs and batches: levels are gauges, dropped_* one counter by reason,
// probe_* one counter by name, the rest one counter by name (the set is fixed by the agent's code).
void agent_counter_metrics(Builder& b, const std::string& node, const json& counters) {
  auto& dropped =
      b.counter("netprism_agent_dropped_records_total", "records an agent had to drop, by reason");
  auto& probe = b.counter("netprism_agent_probe_events_total", "kernel probe counters, by name");
  auto& other = b.counter("netprism_agent_events_total", "agent delivery counters, by name");
  for (const auto& [name, v] : counters.items()) {
    if (!v.is_number()) continue;
    const double x = v.get<double>();
    if (name == "spool_bytes")
      b.set("netprism_agent_spool_bytes", "bytes in the agent's on-disk spool", x, {{"node", node}});
    else if (name == "pending")
      b.set("netprism_agent_pending_records", "records shipped, not yet acknowledged", x, {{"node", node}});
    else if (name == "rtt_us")
      b.set("netprism_agent_rtt_seconds", "agent-to-aggregator round trip", x / 1e6, {{"node", node}});
    else if (name.rfind("dropped_", 0) == 0)
      dropped.Add({{"node", node}, {"reason", name.substr(8)}}).Increment(x);
    else if (name.rfind("probe_", 0) == 0)
      probe.Add({{"node", node}, {"counter", name.substr(6)}}).Increment(x);
    else
      other.Add({{"node", node}, {"counter", name}}).Increment(x);
  }
}

void agent_metrics(Builder& b, const json& st) {
  for (const auto& a : st.value("agents", json::array())) {
    const std::string node = a.value("node", "");
    const Labels l = {{"node", node}};
    b.set("netprism_agent_connected", "1 if the agent was heard from within connected_timeout_s",
          a.value("connected", false) ? 1 : 0, l);
    b.set("netprism_agent_last_seen_timestamp_seconds", "when the agent was last heard from",
          num(a, "last_seen_ns") / 1e9, l);
    b.total("netprism_agent_records_total", "records stored from this agent", num(a, "records"), l);
    b.set("netprism_agent_ingest_lag_seconds", "last message's delay beyond the agent's best one",
          num(a, "lag_ns") / 1e9, l);
    if (a.contains("clock_offset_ns") && a["clock_offset_ns"].is_number())
      b.set("netprism_agent_clock_offset_seconds", "aggregator clock minus agent clock (upper bound)",
            num(a, "clock_offset_ns") / 1e9, l);
    const json clock = a.value("clock", json::object());
    b.set("netprism_agent_clock_synced", "1 if the agent's clock is disciplined (chrony/ptp/ntp)",
          clock.value("synced", false) ? 1 : 0, l);
    if (num(clock, "est_error_ns") >= 0)
      b.set("netprism_agent_clock_uncertainty_seconds", "the clock discipline's own error estimate",
            num(clock, "est_error_ns") / 1e9, l);
    agent_counter_metrics(b, node, a.value("counters", json::object()));
  }
}

void finding_metrics(Builder& b, const analysis::Job& j) {
  std::map<std::string, int> by_kind;
  std::map<std::pair<std::string, std::string>, double> severity;
  for (const auto& f : j.findings) {
    by_kind[f.kind]++;
    auto& s = severity[{f.kind, f.subject}];
    s = std::max(s, f.severity);
  }
  auto& count = b.gauge("netprism_findings", "open findings of a job, by kind");
  for (const char* k : kFindingKinds) count.Add({{"job_id", j.id}, {"kind", k}}).Set(by_kind[k]);
  for (const auto& [k, n] : by_kind)
    count.Add({{"job_id", j.id}, {"kind", k}}).Set(n);  // a kind newer than this list
  auto& sev =
      b.gauge("netprism_finding_severity", "a finding's severity, by kind and subject (node or link)");
  for (const auto& [key, s] : severity)
    sev.Add({{"job_id", j.id}, {"kind", key.first}, {"subject", key.second}}).Set(s);
}

void job_metrics(Builder& b, const json& report, const std::vector<analysis::Job>& jobs) {
  std::map<std::string, json> rows;
  for (const auto& r : report.value("jobs", json::array())) rows[r.value("id", "")] = r;
  auto& step = b.gauge("netprism_job_step_seconds", "step time of a job: its last and median iteration");
  auto& state = b.gauge("netprism_job_state", "1 for the job's current state (running|idle|hung|ended)");
  auto& par = b.gauge("netprism_job_parallelism", "inferred parallelism degrees (dp, pp, tp, ep)");
  for (const auto& j : jobs) {
    const Labels l = {{"job_id", j.id}};
    const json row = rows.count(j.id) ? rows[j.id] : json::object();
    const double last = j.iterations.empty() ? 0 : static_cast<double>(j.iterations.back().duration_ns) / 1e9;
    step.Add({{"job_id", j.id}, {"stat", "last"}}).Set(last);
    step.Add({{"job_id", j.id}, {"stat", "median"}}).Set(num(row, "median_step_ms") / 1e3);
    b.total("netprism_job_iterations_total", "iterations recognised in a job's traffic",
            static_cast<double>(j.iterations.size()), l);
    if (!j.iterations.empty())
      b.set("netprism_job_last_iteration_end_timestamp_seconds", "when the job's last iteration ended",
            static_cast<double>(j.iterations.back().end_ns) / 1e9, l);
    for (const char* s : kJobStates) state.Add({{"job_id", j.id}, {"state", s}}).Set(j.state == s ? 1 : 0);
    b.set("netprism_job_nodes", "nodes taking part in the job", static_cast<double>(j.nodes.size()), l);
    if (row.contains(
            "tenant"))  // an info series to join on (tenants.hpp), so other series keep their identity
      b.set("netprism_job_info", "the job's tenant and scheduler job name (from --tenants)", 1,
            {{"job_id", j.id}, {"tenant", row.value("tenant", "")}, {"job_name", row.value("job_name", "")}});
    b.set("netprism_job_time_lost_ratio", "share of the observed time lost to the diagnosed causes",
          num(row, "time_lost_share"), l);
    auto& lost = b.gauge("netprism_job_time_lost_seconds", "wall time lost, by cause");
    const json causes = row.value("time_lost_s", json::object());  // items() needs a live object
    for (const auto& [cause, v] : causes.items())
      if (cause != "total" && v.is_number())
        lost.Add({{"job_id", j.id}, {"cause", cause}}).Set(v.get<double>());
    const std::pair<const char*, int> degrees[] = {{"dp", j.parallelism.dp},
                                                   {"pp", j.parallelism.pp},
                                                   {"tp", j.parallelism.tp_hint},
                                                   {"ep", j.parallelism.ep}};
    for (const auto& [dim, v] : degrees) par.Add({{"job_id", j.id}, {"dim", dim}}).Set(v);
    finding_metrics(b, j);
  }
}

}  // namespace

std::string render_metrics(const json& status, const json& report, const std::vector<analysis::Job>& jobs) {
  Builder b;
  b.set("netprism_build_info", "the aggregator's version", 1, {{"version", std::string(kVersion)}});
  b.set("netprism_agents_connected_timeout_seconds", "an agent heard within this counts as connected",
        num(status, "connected_timeout_s"));
  ingest_metrics(b, status);
  agent_metrics(b, status);
  job_metrics(b, report, jobs);
  const json fleet = report.value("fleet", json::object());
  // The report's node-hours, in base units (node-seconds).
  b.set("netprism_fleet_observed_node_seconds", "node time of training observed",
        num(fleet, "node_hours") * 3600);
  b.set("netprism_fleet_lost_node_seconds", "node time lost to the diagnosed causes",
        num(fleet, "node_hours_lost") * 3600);
  return prometheus::TextSerializer().Serialize(b.collect());
}

}  // namespace netprism::daemon
