// The pure parts of the operators' endpoints: the /metrics rendering of fixed documents, the webhooks'
// change tracking, and the --http address syntax.
#include <gtest/gtest.h>

#include "daemon/http_api.hpp"
#include "daemon/metrics.hpp"
#include "daemon/tenants.hpp"
#include "daemon/webhooks.hpp"

using namespace netprism;
using nlohmann::json;

namespace {

analysis::Job job(const std::string& id, const std::string& state, std::vector<uint64_t> steps_ms) {
  analysis::Job j;
  j.id = id;
  j.state = state;
  j.nodes = {"n0", "n1"};
  j.parallelism.dp = 2;
  uint64_t t = 1'000'000'000;
  for (std::size_t i = 0; i < steps_ms.size(); ++i) {
    analysis::Iteration it;
    it.index = static_cast<int>(i);
    it.start_ns = t;
    it.duration_ns = steps_ms[i] * 1'000'000;
    it.end_ns = t += it.duration_ns;
    j.iterations.push_back(it);
  }
  return j;
}

analysis::Finding finding(const std::string& kind, const std::string& subject, int first, double severity) {
  analysis::Finding f;
  f.kind = kind;
  f.subject = subject;
  f.first_iteration = first;
  f.severity = severity;
  return f;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

}  // namespace

TEST(Metrics, RendersTheDocumentsWithConventionalNamesAndLabels) {
  json status = {
      {"agents",
       {{{"node", "n0"},
         {"connected", true},
         {"last_seen_ns", 2'000'000'000},
         {"records", 40},
         {"lag_ns", 5'000'000},
         {"clock_offset_ns", -1500},
         {"clock", {{"synced", true}, {"est_error_ns", 2000}}},
         {"counters",
          {{"spool_bytes", 4096}, {"dropped_spool_full", 3}, {"probe_ringbuf_full", 2}, {"acked", 37}}}}}},
      {"ingest", {{"records_stored", 40}, {"rejected", 2}, {"rejected_by_reason", {{"bad N", 2}}}}},
      {"store", {{"compressed_bytes", 1234}, {"commit_failing", false}}},
      {"analysis",
       {{"took_ms", 12.5},
        {"dropped_events", 7},
        {"dropped_by_cause",
         {{"queue_full", 4}, {"conn_table_full", 1}, {"xfer_bound", 2}, {"undecodable", 0}}}}},
      {"connected_timeout_s", 15}};
  auto j = job("j1", "running", {100, 300, 200});
  j.findings = {finding("straggler", "n1", 1, 0.3), finding("straggler", "n1", 2, 0.5)};
  json report = {{"jobs", {{{"id", "j1"}, {"median_step_ms", 200.0}, {"time_lost_share", 0.25}}}}};
  const std::string m = daemon::render_metrics(status, report, {j});

  EXPECT_TRUE(has_line(m, "netprism_job_step_seconds{job_id=\"j1\",stat=\"last\"} 0.2")) << m;
  EXPECT_TRUE(has_line(m, "netprism_job_step_seconds{job_id=\"j1\",stat=\"median\"} 0.2"));
  EXPECT_TRUE(has_line(m, "netprism_job_iterations_total{job_id=\"j1\"} 3"));
  EXPECT_TRUE(has_line(m, "netprism_job_state{job_id=\"j1\",state=\"running\"} 1"));
  EXPECT_TRUE(has_line(m, "netprism_job_state{job_id=\"j1\",state=\"hung\"} 0"));
  EXPECT_TRUE(has_line(m, "netprism_job_time_lost_ratio{job_id=\"j1\"} 0.25"));
  EXPECT_TRUE(has_line(m, "netprism_findings{job_id=\"j1\",kind=\"straggler\"} 2"));
  EXPECT_TRUE(has_line(m, "netprism_findings{job_id=\"j1\",kind=\"hang\"} 0"));
  EXPECT_TRUE(has_line(m, "netprism_findings{job_id=\"j1\",kind=\"fabric\"} 0"));
  EXPECT_TRUE(has_line(m, "netprism_finding_severity{job_id=\"j1\",kind=\"straggler\",subject=\"n1\"} 0.5"));
  EXPECT_TRUE(has_line(m, "netprism_job_parallelism{dim=\"dp\",job_id=\"j1\"} 2"));
  EXPECT_TRUE(has_line(m, "netprism_ingest_records_total 40"));
  EXPECT_TRUE(has_line(m, "netprism_ingest_rejected_total{reason=\"bad N\"} 2"));
  EXPECT_TRUE(has_line(m, "netprism_store_bytes 1234"));
  EXPECT_TRUE(has_line(m, "netprism_analysis_pass_seconds 0.0125"));
  EXPECT_TRUE(has_line(m, "netprism_analysis_dropped_events_total 7"));
  EXPECT_TRUE(has_line(m, "netprism_analysis_dropped_events_by_cause_total{cause=\"queue_full\"} 4"));
  EXPECT_TRUE(has_line(m, "netprism_analysis_dropped_events_by_cause_total{cause=\"conn_table_full\"} 1"));
  EXPECT_TRUE(has_line(m, "netprism_analysis_dropped_events_by_cause_total{cause=\"xfer_bound\"} 2"));
  EXPECT_TRUE(has_line(m, "netprism_analysis_dropped_events_by_cause_total{cause=\"undecodable\"} 0"));
  EXPECT_TRUE(has_line(m, "netprism_agent_connected{node=\"n0\"} 1"));
  EXPECT_TRUE(has_line(m, "netprism_agent_spool_bytes{node=\"n0\"} 4096"));
  EXPECT_TRUE(has_line(m, "netprism_agent_dropped_records_total{node=\"n0\",reason=\"spool_full\"} 3"));
  EXPECT_TRUE(has_line(m, "netprism_agent_probe_events_total{counter=\"ringbuf_full\",node=\"n0\"} 2"));
  EXPECT_TRUE(has_line(m, "netprism_agent_events_total{counter=\"acked\",node=\"n0\"} 37"));
  EXPECT_TRUE(has_line(m, "netprism_agent_clock_uncertainty_seconds{node=\"n0\"} 2e-06"));
  EXPECT_TRUE(has_line(m, "# TYPE netprism_ingest_records_total counter"));
  EXPECT_TRUE(has_line(m, "# TYPE netprism_findings gauge"));
  EXPECT_EQ(m.find("job=\""), std::string::npos) << "the `job` label belongs to Prometheus";
}

TEST(Metrics, EmptyDocumentsStillRender) {
  const std::string m = daemon::render_metrics(json::object(), json::object(), {});
  EXPECT_TRUE(has_line(m, "netprism_ingest_records_total 0")) << m;
}

TEST(ChangeTracker, AnnouncesNewFindingsAndStateChangesOnce) {
  auto j = job("j1", "running", {100, 100});
  j.findings = {finding("hang", "j1", 1, 1)};
  daemon::ChangeTracker t({j});  // what was known at start is not announced again
  EXPECT_TRUE(t.changes({j}).empty());

  j.findings.push_back(finding("straggler", "n1", 4, 0.2));
  auto ev = t.changes({j});
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["event"], "finding");
  EXPECT_EQ(ev[0]["finding"]["subject"], "n1");
  EXPECT_EQ(ev[0]["finding"]["first_iteration"], 4);

  j.findings.back() = finding("straggler", "n1", 3, 0.4);  // refined by a later pass: not news
  j.findings.push_back(finding("slow_iteration", "j1", 7, 1));
  j.findings.push_back(finding("slow_iteration", "j1", 9, 1));  // a second slow run is
  ev = t.changes({j});
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0]["finding"]["first_iteration"], 7);
  EXPECT_EQ(ev[1]["finding"]["first_iteration"], 9);

  j.state = "hung";
  auto k = job("j2", "running", {50});
  ev = t.changes({j, k});
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0]["event"], "job_state");
  EXPECT_EQ(ev[0]["previous"], "running");
  EXPECT_EQ(ev[0]["state"], "hung");
  EXPECT_EQ(ev[1]["job"], "j2");
  EXPECT_TRUE(ev[1]["previous"].is_null());
  EXPECT_TRUE(t.changes({j, k}).empty());
}

TEST(HttpListen, ParsesAddressesAndRejectsMalformedOnes) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(daemon::parse_http_listen("127.0.0.1:7472", host, port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 7472);
  ASSERT_TRUE(daemon::parse_http_listen("[::1]:9100", host, port));
  EXPECT_EQ(host, "::1");
  ASSERT_TRUE(daemon::parse_http_listen(":8080", host, port));
  EXPECT_EQ(host, "0.0.0.0");
  for (const char* bad : {"", "127.0.0.1", "host:", "host:0", "host:65536", "host:80x", "host:123456"})
    EXPECT_FALSE(daemon::parse_http_listen(bad, host, port)) << bad;
}

TEST(Tenants, ParsesTheSchedulerFileAndAttributesByMajority) {
  std::string err;
  auto m = daemon::parse_tenants(
      "# written by the scheduler\nn0 acme llm-7b\nn1 acme llm-7b\n"
      "n2 acme -\n10.0.0.9 globex\n\n",
      err);
  ASSERT_TRUE(m) << err;
  EXPECT_EQ(m->size(), 4u);
  auto t = daemon::attribute(*m, {"n0", "n1", "n2", "10.0.0.9", "unmapped"});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tenant, "acme");
  EXPECT_EQ(t->job_name, "llm-7b");
  t = daemon::attribute(*m, {"10.0.0.9"});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tenant, "globex");
  EXPECT_EQ(t->job_name, "");
  EXPECT_FALSE(daemon::attribute(*m, {"elsewhere"}));
  EXPECT_FALSE(daemon::parse_tenants("n0\n", err));
  EXPECT_NE(err.find("line 1"), std::string::npos) << err;
  EXPECT_FALSE(daemon::parse_tenants("n0 a b c\n", err));
}

TEST(Metrics, JobInfoCarriesTheTenant) {
  json report = {{"jobs", {{{"id", "j1"}, {"tenant", "acme"}, {"job_name", "llm-7b"}}}}};
  const std::string m = daemon::render_metrics(json::object(), report, {job("j1", "running", {100})});
  EXPECT_TRUE(has_line(m, "netprism_job_info{job_id=\"j1\",job_name=\"llm-7b\",tenant=\"acme\"} 1")) << m;
}

TEST(Tenants, ReadsAKubernetesPodExport) {
  const std::string pods = R"({"apiVersion": "v1", "kind": "List", "items": [
    {"metadata": {"namespace": "team-a", "labels": {"job-name": "pretrain-70b"}},
     "spec": {"nodeName": "gpu-01"}, "status": {"phase": "Running", "podIPs": [{"ip": "10.1.0.5"}]}},
    {"metadata": {"namespace": "team-b", "ownerReferences": [{"kind": "PyTorchJob", "name": "ft-8b"}]},
     "spec": {"nodeName": "gpu-02"}, "status": {"phase": "Running", "podIPs": [{"ip": "10.1.0.6"}]}},
    {"metadata": {"namespace": "team-c"}, "spec": {"nodeName": "gpu-03"}, "status": {"phase": "Succeeded"}}]})";
  std::string err;
  auto m = daemon::parse_tenants(pods, err);
  ASSERT_TRUE(m) << err;
  auto t = daemon::attribute(*m, {"gpu-01", "10.1.0.5"});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tenant, "team-a");
  EXPECT_EQ(t->job_name, "pretrain-70b");
  t = daemon::attribute(*m, {"10.1.0.6"});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tenant, "team-b");
  EXPECT_EQ(t->job_name, "ft-8b");
  EXPECT_FALSE(daemon::attribute(*m, {"gpu-03"})) << "a finished pod no longer attributes its node";
  EXPECT_FALSE(daemon::parse_tenants("{\"kind\": \"Pod\"}", err));
}
