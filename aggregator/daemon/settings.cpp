#include "settings.hpp"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <thread>
#include <vector>

#include "netprism/cli.hpp"
#include "clickhouse/http.hpp"
#include "clickhouse/shard.hpp"
#include "flowin/listener.hpp"
#include "netprism/config.hpp"

namespace netprism::daemon {

namespace {
constexpr const char* kDefaultConfig = "/etc/netprism/aggregator.toml";

// Every --flow-listen URL well-formed (a usage error names the first bad one).
bool flow_listen_ok(const Settings& s) {
  for (const auto& url : s.flow_listen) {
    std::string err;
    if (!flowin::parse_listen(url, err)) {
      std::cerr << "netprism-aggregator: --flow-listen " << err << "\n";
      return false;
    }
  }
  return true;
}

// Ranges the option parser cannot express (a usage error names the option).
bool values_ok(const Settings& s) {
  // Negative levels are zstd's fast modes (less compression, less CPU).
  if (s.zstd_level < -7 || s.zstd_level > 19 || s.zstd_level == 0) {
    std::cerr << "netprism-aggregator: --zstd-level must be -7..-1 or 1..19\n";
    return false;
  }
  if (s.max_message_bytes < 1024 || s.max_message_bytes > (1LL << 30)) {
    std::cerr << "netprism-aggregator: --max-message-bytes must be 1024..1073741824\n";
    return false;
  }
  if (s.peer_cut_s < 1 || s.peer_cut_s > 3600) {
    std::cerr << "netprism-aggregator: --peer-cut-s must be 1..3600\n";
    return false;
  }
  return true;
}

// --analyze-from-clickhouse and --shard well-formed; the role has no ingest, so no sink or collectors.
bool analyzer_ok(const Settings& s) {
  std::string err;
  if (!s.clickhouse_analyze_from.empty() && !clickhouse::parse_url(s.clickhouse_analyze_from, err))
    err = "--analyze-from-clickhouse: " + err;
  else if (!s.clickhouse_shard.empty() && s.clickhouse_analyze_from.empty())
    err = "--shard needs --analyze-from-clickhouse";
  else if (!s.clickhouse_shard.empty() && !clickhouse::parse_shard(s.clickhouse_shard, err))
    ;
  else if (!s.clickhouse_analyze_from.empty() && (!s.clickhouse_url.empty() || !s.flow_listen.empty()))
    err = "--analyze-from-clickhouse ingests nothing: it cannot take --clickhouse or --flow-listen";
  if (!err.empty()) std::cerr << "netprism-aggregator: " << err << "\n";
  return err.empty();
}

using FromFile = std::vector<std::pair<CLI::Option*, std::function<bool(const config::Values&)>>>;

// The operators' endpoints (HTTP API, webhooks; config [http], [webhooks]) and tenant attribution.
void add_operator_options(CLI::App& app, Settings& s, config::Schema& schema, FromFile& from_file) {
  struct Str {
    const char* flag;
    const char* key;
    std::string* v;
    const char* help;
  };
  for (const auto& o :
       {Str{"--http", "http.listen", &s.http_listen,
            "HTTP endpoint ADDR:PORT for /metrics and /api/v1 (default: off)"},
        Str{"--http-token", "http.token_file", &s.http_token_file,
            "file holding the bearer token the HTTP API requires"},
        Str{"--tenants", "tenants_file", &s.tenants_file,
            "file of 'NODE_OR_IP TENANT [JOB_NAME]' lines (scheduler-written)"},
        Str{"--clickhouse", "clickhouse.url", &s.clickhouse_url,
            "also store every acknowledged batch in ClickHouse: "
            "http://HOST:8123/?database=netprism[&cluster=NAME] (docs/clickhouse.md)"},
        Str{"--analyze-from-clickhouse", "clickhouse.analyze_from", &s.clickhouse_analyze_from,
            "analysis role: no ingest; analyse every aggregator's flowlets as they are "
            "inserted into ClickHouse at this URL and serve queries (docs/clickhouse.md)"},
        Str{"--shard", "clickhouse.shard", &s.clickhouse_shard,
            "with --analyze-from-clickhouse: analyse only shard K/N of the jobs"}}) {
    auto* opt = app.add_option(o.flag, *o.v, o.help);
    schema[o.key] = config::Type::kString;
    from_file.emplace_back(opt, [key = std::string(o.key), v = o.v](const config::Values& vals) {
      if (auto x = config::get<std::string>(vals, key)) *v = *x;
      return true;
    });
  }
  auto* days = app.add_option("--clickhouse-retention-days", s.clickhouse_retention_days,
                              "drop ClickHouse day partitions older than this many days (0: keep)")
                   ->check(CLI::NonNegativeNumber);
  schema["clickhouse.retention_days"] = config::Type::kInteger;
  from_file.emplace_back(days, [v = &s.clickhouse_retention_days](const config::Values& vals) {
    auto x = config::get<int64_t>(vals, "clickhouse.retention_days");
    if (x && *x < 0) return false;
    if (x) *v = *x;
    return true;
  });
  auto* lag = app.add_option("--clickhouse-lag-s", s.clickhouse_lag_s,
                             "with --analyze-from-clickhouse: how late after its stamp an insert may show")
                  ->check(CLI::Range(int64_t{1}, int64_t{3600}));
  schema["clickhouse.lag_s"] = config::Type::kInteger;
  from_file.emplace_back(lag, [v = &s.clickhouse_lag_s](const config::Values& vals) {
    auto x = config::get<int64_t>(vals, "clickhouse.lag_s");
    if (x && (*x < 1 || *x > 3600)) return false;
    if (x) *v = *x;
    return true;
  });
  auto* hooks =
      app.add_option("--webhook", s.webhooks, "POST findings and job state changes here (repeatable)");
  schema["webhooks.urls"] = config::Type::kStringList;
  from_file.emplace_back(hooks, [v = &s.webhooks](const config::Values& vals) {
    if (auto x = config::get<std::vector<std::string>>(vals, "webhooks.urls")) *v = *x;
    return true;
  });
}

// The repeatable --flow-listen (config list flow_listen) and --insecure (config bool insecure).
void add_list_and_flag_options(CLI::App& app, Settings& s, config::Schema& schema, FromFile& from_file) {
  auto* flow_opt = app.add_option("--flow-listen", s.flow_listen,
                                  "collect switch telemetry: ipfix://ADDR:PORT (IPFIX, NetFlow v9) or "
                                  "sflow://ADDR:PORT (repeatable)");
  schema["flow_listen"] = config::Type::kStringList;
  from_file.emplace_back(flow_opt, [&s](const config::Values& vals) {
    if (auto x = config::get<std::vector<std::string>>(vals, "flow_listen")) s.flow_listen = *x;
    return true;
  });
  auto* insecure = app.add_flag("--insecure", s.insecure, "plain TCP without CURVE (no authentication)");
  schema["insecure"] = config::Type::kBool;
  from_file.emplace_back(insecure, [&s](const config::Values& vals) {
    if (auto x = config::get<bool>(vals, "insecure")) s.insecure = *x;
    return true;
  });
}
}  // namespace

std::optional<int> parse_settings(int argc, char** argv, Settings& s) {
  CLI::App app{"netprism-aggregator: stores agents' flow records and analyses training jobs",
               "netprism-aggregator"};
  cli::standard_flags(app);
  struct Int {
    const char* flag;
    int64_t* v;
    const char* help;
  };
  struct Str {
    const char* flag;
    std::string* v;
    const char* help;
  };
  std::vector<Str> strs = {
      {"--listen", &s.listen, "agent ingest endpoint (ZeroMQ ROUTER)"},
      {"--query", &s.query, "query endpoint for the netprism CLI (ZeroMQ REP)"},
      {"--data-dir", &s.data_dir, "where the embedded store lives"},
      {"--topology", &s.topology,
       "file of 'IP NODE' lines naming exporters' endpoints (and switch, link, path lines: docs/formats.md)"},
      {"--server-key", &s.server_key, "CURVE secret key file (netprism keygen)"},
      {"--agents", &s.agents, "allowlist of agents: lines 'NODE PUBKEY'"},
      {"--clients", &s.clients, "allowlist of query clients: lines 'read|admin PUBKEY'"}};
  std::vector<Int> ints = {
      {"--retention-age-s", &s.retention_age_s, "delete batches older than this (0: keep)"},
      {"--retention-bytes", &s.retention_bytes, "keep at most this many compressed bytes (0: no bound)"},
      {"--analysis-interval-ms", &s.analysis_interval_ms, "how often the live analysis runs"},
      {"--analysis-window-s", &s.analysis_window_s, "recent window the live analysis looks at"},
      {"--analysis-max-events", &s.analysis_max_events, "memory bound of the analysis window"},
      {"--connected-timeout-s", &s.connected_timeout_s, "agent counts as connected if heard within this"},
      {"--zstd-level", &s.zstd_level, "compression level of stored batches"},
      {"--max-message-bytes", &s.max_message_bytes, "largest agent message accepted"},
      {"--peer-bytes-per-s", &s.peer_bytes_per_s, "ingest byte budget of each sender (0: none)"},
      {"--peer-cut-bytes", &s.peer_cut_bytes, "cut a key with this much unanswered on a connection"},
      {"--peer-cut-s", &s.peer_cut_s, "first cool-down of a cut key, in s (doubles for each further cut)"},
      {"--max-nodes", &s.max_nodes, "most registered nodes; HELLOs beyond are refused (0: no bound)"},
      {"--ingest-threads", &s.ingest_threads,
       "threads decoding/compressing batches (0: one per core, max 4)"},
      {"--query-max-rows", &s.query_max_rows, "most rows a flows query returns (0: no bound)"},
      {"--query-deadline-ms", &s.query_deadline_ms, "a flows query gives up after this (0: never)"}};
  FromFile from_file;
  config::Schema schema;
  for (auto& o : strs) {
    auto* opt = app.add_option(o.flag, *o.v, o.help)->capture_default_str();
    std::string key = std::string(o.flag + 2);
    std::replace(key.begin(), key.end(), '-', '_');
    schema[key] = config::Type::kString;
    from_file.emplace_back(opt, [key, v = o.v](const config::Values& vals) {
      if (auto x = config::get<std::string>(vals, key)) *v = *x;
      return true;
    });
  }
  for (auto& o : ints) {
    auto* opt = app.add_option(o.flag, *o.v, o.help)->capture_default_str();
    if (std::string(o.flag) != "--zstd-level") opt->check(CLI::NonNegativeNumber);
    std::string key = std::string(o.flag + 2);
    std::replace(key.begin(), key.end(), '-', '_');
    schema[key] = config::Type::kInteger;
    from_file.emplace_back(opt, [key, v = o.v](const config::Values& vals) {
      if (auto x = config::get<int64_t>(vals, key)) {
        if (*x < 0 && key != "zstd_level") return false;
        *v = *x;
      }
      return true;
    });
  }
  add_list_and_flag_options(app, s, schema, from_file);
  add_operator_options(app, s, schema, from_file);
  auto* cfg = app.add_option("--config", s.config,
                             std::string("TOML config file (default ") + kDefaultConfig + " when it exists)");
  if (auto rc = cli::parse(app, argc, argv)) return rc;

  std::string path = s.config;
  if (cfg->count() == 0 && ::access(kDefaultConfig, R_OK) == 0) path = kDefaultConfig;
  if (!path.empty()) {
    auto r = config::load_file(path, schema);
    if (!r) {
      std::cerr << "netprism-aggregator: " << r.error << "\n";
      return cli::kExitError;
    }
    for (auto& [opt, apply] : from_file) {
      if (opt->count() > 0) continue;  // the flag wins
      if (!apply(r.values)) {
        std::cerr << "netprism-aggregator: " << path << ": key '" << opt->get_name().substr(2)
                  << "' must not be negative\n";
        return cli::kExitError;
      }
    }
  }
  if (!values_ok(s) || !flow_listen_ok(s)) return cli::kExitUsage;
  if (std::string err; !s.clickhouse_url.empty() && !clickhouse::parse_url(s.clickhouse_url, err)) {
    std::cerr << "netprism-aggregator: --clickhouse: " << err << "\n";
    return cli::kExitUsage;
  }
  if (!analyzer_ok(s)) return cli::kExitUsage;
  if (s.analysis_interval_ms == 0) s.analysis_interval_ms = 1;
  if (s.ingest_threads == 0)
    s.ingest_threads = std::clamp<int64_t>(static_cast<int64_t>(std::thread::hardware_concurrency()), 1, 4);
  return std::nullopt;
}

}  // namespace netprism::daemon
