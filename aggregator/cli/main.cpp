// netprism: the query CLI. Every command prints a readable table, or with --json one JSON document.
// Exit codes (contracts.md): 0 ok; 2 usage errors; 1 anything else (unknown job, aggregator unreachable).
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>

#include "analysis.hpp"
#include "client.hpp"
#include "export.hpp"
#include "html_report.hpp"
#include "netprism/cli.hpp"
#include "netprism/keys.hpp"
#include "clickhouse_input.hpp"
#include "offline.hpp"
#include "render.hpp"

using namespace netprism;
using nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop = true;
}

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int report(const cli::CallError& e) {
  return cli::fail("netprism", e.message);  // every call error (unreachable, unknown job, server error) is 1
}

// Runs fetch+print once, or repeatedly like `top` with --watch (until Ctrl-C). The first failure decides
// the exit code; later ones (aggregator restarting) are shown on screen and retried.
int show(bool watch, double interval_s, bool as_json,
         const std::function<std::optional<json>(cli::CallError&)>& fetch,
         const std::function<std::string(const json&)>& render) {
  bool first = true;
  do {
    cli::CallError err;
    auto doc = fetch(err);
    if (!doc && first) return report(err);
    first = false;
    if (watch && !as_json) std::cout << "\033[H\033[2J";  // home + clear, as top does
    if (!doc) {
      std::cout << "netprism: " << err.message << " (retrying)\n";
    } else if (as_json) {
      std::cout << doc->dump() << "\n";
    } else {
      if (watch) std::cout << "every " << interval_s << " s   " << cli::format_time(now_ns()) << "\n\n";
      std::cout << render(*doc);
    }
    std::cout.flush();
    if (!watch) break;
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(interval_s);
    while (!g_stop && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (!g_stop);
  return cli::kExitOk;
}

// The command line: its options' values and subcommands (define()), and what it asks for (run()).
struct Invocation {
  CLI::App app{"netprism: query the netprism aggregator about training jobs", "netprism"};
  std::string endpoint;
  bool as_json = false;
  // 5 s: an unreachable aggregator is reported well within the contract's 10 s, while a busy one answering
  // a large `flows` query still has time to reply.
  double timeout_s = 5;
  CLI::App* status = nullptr;
  CLI::App* flows = nullptr;
  std::string node;
  uint64_t since = 0, until = UINT64_MAX, limit = 0;
  double interval = 1;
  bool watch = false;
  CLI::App* jobs = nullptr;
  std::string id;
  CLI::App* job = nullptr;
  CLI::App* timeline = nullptr;
  CLI::App* diagnose = nullptr;
  std::string perfetto_file;
  CLI::App* exp = nullptr;
  std::string input, format, topology, clickhouse_url, shard_text = "0/1";
  CLI::App* analyze = nullptr;
  CLI::App* rep = nullptr;
  std::string html_file;
  std::string output;
  CLI::App* rec = nullptr;
  std::string key_file, server_pub_file, keygen_prefix;
  bool insecure = false;
  CLI::App* keygen = nullptr;
  void define();  // the options and subcommands
  int run();      // the parsed command, carried out: its exit code
  int run_report(cli::Client& client, const std::function<std::optional<json>(cli::CallError&)>& ask_report);
  int run_keygen() const;
};

void Invocation::define() {
  cli::standard_flags(app);
  const char* env = std::getenv("NETPRISM_AGGREGATOR");
  endpoint = env && *env ? env : "tcp://127.0.0.1:7471";
  app.add_option("--aggregator", endpoint,
                 "aggregator query endpoint (default $NETPRISM_AGGREGATOR or tcp://127.0.0.1:7471)");
  app.add_flag("--json", as_json, "print one JSON document");
  app.add_option("--timeout", timeout_s, "seconds to wait for the aggregator's answer")
      ->check(CLI::Range(0.1, 9.0));
  // CURVE (issue 18): our key pair and the aggregator's public key, from flags or the environment.
  const char* env_key = std::getenv("NETPRISM_KEY");
  const char* env_pub = std::getenv("NETPRISM_SERVER_PUB");
  key_file = env_key ? env_key : "";
  server_pub_file = env_pub ? env_pub : "";
  app.add_option("--key", key_file, "this client's CURVE secret key file (default $NETPRISM_KEY)");
  app.add_option("--server-pub", server_pub_file,
                 "the aggregator's CURVE public key file (default $NETPRISM_SERVER_PUB)");
  app.add_flag("--insecure", insecure, "plain TCP without CURVE (an aggregator run with insecure = true)");
  app.fallthrough();  // global options are accepted after the command too
  app.require_subcommand(1, 1);

  status = app.add_subcommand("status", "agents, their counters and clocks, record counts");

  flows = app.add_subcommand("flows", "per-flow totals seen by each node");
  flows->add_option("--node", node, "only flows seen by this node");
  flows->add_option("--since", since, "start of the range (Unix ns)");
  flows->add_option("--until", until, "end of the range (Unix ns)");
  flows->add_option("--limit", limit, "at most this many flows, largest first (0: all)");

  jobs = app.add_subcommand("jobs", "training jobs recognised from the traffic");
  jobs->add_flag("--watch", watch, "refresh continuously, like top");
  jobs->add_option("--interval", interval, "seconds between refreshes")->check(CLI::Range(0.1, 3600.0));

  job = app.add_subcommand("job", "a job's nodes and parallelism");
  job->add_option("ID", id, "job id")->required();
  timeline = app.add_subcommand("timeline", "a job's iterations");
  timeline->add_option("ID", id, "job id")->required();
  timeline->add_flag("--watch", watch, "refresh continuously, like top");
  timeline->add_option("--interval", interval, "seconds between refreshes")->check(CLI::Range(0.1, 3600.0));
  diagnose = app.add_subcommand("diagnose", "what slows a job down");
  diagnose->add_option("ID", id, "job id")->required();

  exp = app.add_subcommand("export", "export a job's timeline");
  exp->add_option("ID", id, "job id")->required();
  exp->add_option("--perfetto", perfetto_file, "write Chrome/Perfetto trace-event JSON here")->required();

  analyze = app.add_subcommand("analyze", "analyse a recording without an aggregator");
  auto* in_opt =
      analyze->add_option("--input", input, "aggregator data dir, `netprism record` file, or flow CSV");
  auto* ch_opt = analyze->add_option("--clickhouse", clickhouse_url,
                                     "analyse what every aggregator stored in ClickHouse instead: "
                                     "http://HOST:8123/?database=netprism[&cluster=NAME]");
  in_opt->excludes(ch_opt);
  analyze->add_option(
      "--shard", shard_text,
      "with --clickhouse: only shard K of N of the jobs (K/N; jobs split by the nodes they span)");
  analyze
      ->add_option(
          "--format", format,
          "native, csv, rdma-counters (RDMA port counters + QP tables, docs/formats.md), or a "
          "capture of exporters' datagrams: ipfix (IPFIX/NetFlow v9) or sflow (default: native or csv "
          "by content)")
      ->check(CLI::IsMember({"native", "csv", "rdma-counters", "ipfix", "sflow"}));
  analyze->add_option("--topology", topology, "file of 'IP NODE' lines");
  analyze->add_option("--perfetto", perfetto_file, "also write every job's Chrome/Perfetto trace here");
  analyze->add_option("--since", since, "only records from this time on (Unix ns; also with --clickhouse)");
  analyze->add_option("--until", until, "only records up to this time (Unix ns; also with --clickhouse)");

  rep = app.add_subcommand(
      "report", "fleet view: per job its nodes, hours observed, iterations, step time, time lost, faults");
  rep->add_option("--input", input, "report on a recording instead (as `analyze --input`)");
  rep->add_option("--format", format,
                  "with --input: native, csv, rdma-counters, ipfix or sflow (default: by content)")
      ->check(CLI::IsMember({"native", "csv", "rdma-counters", "ipfix", "sflow"}));
  rep->add_option("--topology", topology, "with --input: file of 'IP NODE' lines");
  rep->add_flag("--watch", watch, "refresh continuously, like top");
  rep->add_option("--interval", interval, "seconds between refreshes")->check(CLI::Range(0.1, 3600.0));
  rep->add_option("--html", html_file, "write the report as one self-contained HTML page (charts) here");

  rec = app.add_subcommand("record", "copy the aggregator's stored records into a native recording file");
  rec->add_option("--output,-o", output, "recording file to write")->required();
  rec->add_option("--since", since, "start of the range (Unix ns)");
  rec->add_option("--until", until, "end of the range (Unix ns)");

  keygen = app.add_subcommand("keygen", "write a CURVE key pair: PREFIX.key (secret, 0600), PREFIX.pub");
  keygen->add_option("--out", keygen_prefix, "path prefix of the two files")->required();
}

// `keygen`: a CURVE key pair for an agent, a query client or the aggregator (docs/deploy.md, "Keys").
int Invocation::run_keygen() const {
  keys::KeyPair kp;
  if (auto e = keys::generate(keygen_prefix, &kp); !e.empty()) return cli::fail("netprism", e);
  std::cout << (as_json ? json{{"key", keygen_prefix + ".key"},
                               {"pub", keygen_prefix + ".pub"},
                               {"public", kp.public_z85}}
                                  .dump() +
                              "\n"
                        : "wrote " + keygen_prefix + ".key and " + keygen_prefix + ".pub (public key " +
                              kp.public_z85 + ")\n");
  return cli::kExitOk;
}

// `report`: over a recording (--input), as one HTML page (--html), or the aggregator's live fleet view.
int Invocation::run_report(cli::Client& client,
                           const std::function<std::optional<json>(cli::CallError&)>& ask_report) {
  if ((!format.empty() || !topology.empty()) && input.empty()) {
    std::cerr << "netprism: report: --format and --topology need --input (see --help)\n";
    return cli::kExitUsage;
  }
  if (!input.empty()) {
    if (watch) {
      std::cerr << "netprism: report: --watch needs the aggregator, not --input (see --help)\n";
      return cli::kExitUsage;
    }
    std::string err;
    auto r = cli::analyze_recording(input, format, topology, err);
    if (!r) return cli::fail("netprism", err);
    auto doc = analysis::fleet_report(r->result.jobs, r->now_ns);
    if (!html_file.empty())
      return cli::write_html_report(html_file, doc, cli::html_jobs(r->result.jobs), as_json);
    std::cout << (as_json ? doc.dump() + "\n" : cli::render_report(doc));
    return cli::kExitOk;
  }
  if (!html_file.empty()) {
    if (watch) {
      std::cerr << "netprism: report: --html writes one page, not with --watch (see --help)\n";
      return cli::kExitUsage;
    }
    cli::CallError err;
    auto doc = client.call({{"cmd", "report"}}, err);
    auto jobs = doc ? cli::fetch_html_jobs(client, *doc, err) : std::nullopt;
    if (!jobs) return report(err);
    return cli::write_html_report(html_file, *doc, *jobs, as_json);
  }
  return show(watch, interval, as_json, ask_report, cli::render_report);
}

int Invocation::run() {
  if (keygen->parsed()) return run_keygen();
  if (since > until) {
    std::cerr << "netprism: --since is after --until (see --help)\n";
    return cli::kExitUsage;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);

  cli::ClientSecurity security;
  if (!insecure) security.error = keys::load_client(key_file, server_pub_file, security.curve);
  cli::Client client(endpoint, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)),
                     std::move(security));
  auto ask = [&](json req) { return [&client, req](cli::CallError& err) { return client.call(req, err); }; };
  const uint64_t t = now_ns();

  if (analyze->parsed() && input.empty() == clickhouse_url.empty()) {
    std::cerr << "netprism: analyze: give --input or --clickhouse (see --help)\n";
    return cli::kExitUsage;
  }
  if (analyze->parsed() && !clickhouse_url.empty()) {
    if (!perfetto_file.empty() || !format.empty()) {
      std::cerr << "netprism: analyze: --perfetto and --format go with --input (see --help)\n";
      return cli::kExitUsage;
    }
    std::string err;
    auto shard = cli::parse_shard(shard_text, err);
    if (!shard) return cli::fail("netprism", err);
    auto doc = cli::analyze_clickhouse(clickhouse_url, since, until, topology, *shard, err);
    if (!doc) return cli::fail("netprism", err);
    std::cout << (as_json ? doc->dump() + "\n" : cli::render_analysis(*doc));
    return cli::kExitOk;
  }
  if (analyze->parsed() && !perfetto_file.empty())
    return cli::analyze_to_perfetto(input, format, topology, perfetto_file, as_json, {since, until});
  if (analyze->parsed()) {
    std::string err;
    auto doc = cli::analyze_file(input, format, topology, err, {since, until});
    if (!doc) return cli::fail("netprism", err);
    std::cout << (as_json ? doc->dump() + "\n" : cli::render_analysis(*doc));
    return cli::kExitOk;
  }
  if (rep->parsed()) return run_report(client, ask({{"cmd", "report"}}));
  if (status->parsed())
    return show(false, 0, as_json, ask({{"cmd", "status"}}),
                [&](const json& d) { return cli::render_status(d, t); });
  if (flows->parsed()) {
    json req = {{"cmd", "flows"}, {"since", since}, {"until", until}, {"limit", limit}};
    if (!node.empty()) req["node"] = node;
    return show(false, 0, as_json, ask(req), cli::render_flows);
  }
  if (jobs->parsed()) return show(watch, interval, as_json, ask({{"cmd", "jobs"}}), cli::render_jobs);
  if (job->parsed()) return show(false, 0, as_json, ask({{"cmd", "job"}, {"id", id}}), cli::render_job);
  if (timeline->parsed()) {
    // A retired job's timeline comes from the store a page at a time (`next_from`): fetched whole.
    auto ask_timeline = [&client, this](cli::CallError& err) -> std::optional<json> {
      auto doc = client.call({{"cmd", "timeline"}, {"id", id}}, err);
      while (doc && doc->contains("next_from")) {
        auto page = client.call({{"cmd", "timeline"}, {"id", id}, {"from", (*doc)["next_from"]}}, err);
        if (!page) return std::nullopt;
        for (auto& it : (*page)["iterations"]) (*doc)["iterations"].push_back(std::move(it));
        if (page->contains("next_from"))
          (*doc)["next_from"] = (*page)["next_from"];
        else
          doc->erase("next_from");
      }
      return doc;
    };
    return show(watch, interval, as_json, ask_timeline, cli::render_timeline);
  }
  if (diagnose->parsed())
    return show(false, 0, as_json, ask({{"cmd", "diagnose"}, {"id", id}}), cli::render_diagnosis);
  if (exp->parsed()) {
    cli::CallError err;
    auto doc = client.call({{"cmd", "perfetto"}, {"id", id}}, err);
    if (!doc) return report(err);
    std::ofstream f(perfetto_file);
    f << doc->dump() << "\n";
    f.close();
    if (!f) return cli::fail("netprism", "cannot write " + perfetto_file);
    auto events = doc->value("traceEvents", json::array()).size();
    json summary = {{"job", id}, {"file", perfetto_file}, {"events", events}};
    std::cout << (as_json ? summary.dump() + "\n"
                          : "wrote " + perfetto_file + " (" + std::to_string(events) + " trace events)\n");
    return cli::kExitOk;
  }
  if (rec->parsed()) {
    cli::CallError err;
    auto doc = cli::record(client, output, since, until, err);
    if (!doc) return report(err);
    std::cout << (as_json ? doc->dump() + "\n"
                          : "wrote " + output + ": " + doc->value("batches", json(0)).dump() + " batches, " +
                                doc->value("records", json(0)).dump() + " records\n");
    return cli::kExitOk;
  }
  return cli::fail("netprism", "no command given (see --help)");
}

}  // namespace

int main(int argc, char** argv) {
  Invocation cmd;
  cmd.define();
  if (auto rc = cli::parse(cmd.app, argc, argv)) return *rc;
  return cmd.run();
}
