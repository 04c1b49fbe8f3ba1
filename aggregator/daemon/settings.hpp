// netprism-aggregator's settings: command-line flags, each mirrored by a TOML key (flag name with '-' as
// '_'); flags override the file (contracts.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace netprism::daemon {

struct Settings {
  std::string listen = "tcp://0.0.0.0:7470";
  std::string query = "tcp://127.0.0.1:7471";
  std::string data_dir = "/var/lib/netprism/aggregator";
  // Retention: batches older than this (by the time they cover) are deleted. 7 days keeps a week of
  // history for post-mortems of long pretraining runs; 0 disables.
  int64_t retention_age_s = 7 * 24 * 3600;
  // Compressed batch bytes kept at most; the oldest go first. 0 disables. 20 GiB is a few days of a
  // 100-node cluster at the ~35 B/record measured by bench/ingest.
  int64_t retention_bytes = 20LL << 30;
  // How often the analysis runs; it also waits at least twice its own last run time, so it can never take
  // more than a third of a core however large the window gets.
  int64_t analysis_interval_ms = 1000;
  // The recent window the live analysis looks at. 10 min holds hundreds of iterations of typical
  // 0.1-10 s steps: enough for period detection and k-sigma baselines.
  int64_t analysis_window_s = 600;
  // Memory bound of the live analysis: transfers it keeps for the jobs' tails (32 B each) and, at half of
  // it, flowlets waiting for the next pass (112 B each): 2M ~ 64 + 112 MB. What does not fit is counted
  // (`netprism status`: analysis.dropped_events, by cause in dropped_by_cause), never silently lost; the
  // store keeps everything.
  int64_t analysis_max_events = 2000000;
  // An agent is "connected" if it was heard from within this time. Agents send a batch every ~100 ms while
  // there is traffic and a heartbeat at least every few seconds otherwise; 15 s is three missed 5 s
  // heartbeats, long enough not to flap on a busy host, short enough for an operator to notice.
  int64_t connected_timeout_s = 15;
  // zstd level of stored batches. -1 (zstd's first fast level): stored batches are column-encoded
  // (batch_codec.hpp), so what is left for zstd is mostly matches; level 1 also Huffman-codes the literals,
  // which took half of zstd's time for ~4 % fewer bytes (bench/ingest/prepare_bench: 59 vs 30 ns/record,
  // 17.6 vs 18.4 B/record).
  int64_t zstd_level = -1;
  // Largest agent message accepted (also ZeroMQ's per-frame limit on the ingest socket, plus 64 KiB so that
  // frames just above it are answered with a reason). 16 MiB is ~50 agent batches of the default 4,096
  // flowlets (~330 KB) and 80k flowlets at their widest encoding (195 B); it also bounds what ZeroMQ may
  // queue per peer before the daemon reads it (2 messages + 1 in transit = 48 MiB): 8 peers flooding
  // maximum-size messages stay within 400 MiB there (the exhaustion test, issue 18). Was 64 MiB.
  int64_t max_message_bytes = 16LL << 20;
  // Per-peer byte budget of the ingest (issue 18): each sender (its key's node; on plain TCP its connection)
  // gets a token bucket of this many bytes per second, holding up to max(1 s of it, one maximum message). A
  // message beyond it is deferred: not decoded, not acknowledged (the agent keeps it and resends after its
  // ACK timeout), counted in `status` (ingest.deferred*). 32 MiB/s is twice what an agent at its default
  // budget ships (200k records/s x ~80 B); so one peer's flood takes at most that share of the pipeline.
  // 0: no budget.
  int64_t peer_bytes_per_s = 32LL << 20;
  // Cutting a flooding key at the transport (peer_cut.hpp; with CURVE only): a connection whose deferred
  // messages exceed peer_cut_bytes (or a key 4x that within two 5 s periods) has its key refused by the ZAP
  // handler for peer_cut_s (doubling for each further cut, up to an hour) and its connections shut. 16 MiB
  // is above the most a conforming agent leaves unacknowledged on a connection (its window of 16 batches x
  // 4,096 flowlets x 195 B = 12.8 MB); raise it with delivery.window x batching.max_records. 0: never cut.
  int64_t peer_cut_bytes = 16LL << 20;
  int64_t peer_cut_s = 60;
  // Registered nodes at most (HELLOs of new nodes beyond it are refused, counted: ingest.nodes_refused);
  // 0: no bound. 10,000 is ten times the largest cluster the load tests model.
  int64_t max_nodes = 10000;
  // Threads that decode and compress incoming batches (the ingest pool; the receiving thread only moves
  // messages); 0: one per core, at most 4 (beyond that the single SQLite writer is the limit).
  int64_t ingest_threads = 0;
  // HTTP endpoint (http_api.hpp): /metrics and the read-only JSON API; empty: off. The token file holds the
  // bearer token the API requires (/metrics stays open, as Prometheus scrapes expect).
  std::string http_listen;
  std::string http_token_file;
  // URLs that get a JSON POST on each new finding and job state change (webhooks.hpp).
  std::vector<std::string> webhooks;
  // ClickHouse sink (clickhouse_sink.hpp): server URL ("": off) and day partitions kept (0: all).
  std::string clickhouse_url;
  int64_t clickhouse_retention_days = 0;
  // The analysis role (clickhouse_analyzer.hpp): read every aggregator's flowlets from this ClickHouse URL
  // instead of ingesting ("": off), optionally only shard "K/N" of the jobs; rows may become visible up to
  // clickhouse_lag_s after their insert was stamped (60 s: twice the sink's insert timeout).
  std::string clickhouse_analyze_from;
  std::string clickhouse_shard;
  int64_t clickhouse_lag_s = 60;
  // Scheduler-written node/address -> tenant and job name file (tenants.hpp); empty: no attribution.
  std::string tenants_file;
  // Switch telemetry collectors (flowin/listener.hpp): "ipfix://ADDR:PORT" / "sflow://ADDR:PORT", repeatable.
  std::vector<std::string> flow_listen;
  // "IP NODE" lines naming the nodes of addresses no agent reports (exporters' flows); they override HELLOs.
  std::string topology;
  // Query bounds (issue 18): `flows` returns at most this many rows (largest first, "truncated": true beyond;
  // ~250 JSON bytes a row, so 1M rows is a ~250 MB reply, under the CLI's 1 GiB cap) and gives up after this
  // many ms (below the CLI's 9 s largest --timeout, so the client gets the error rather than a timeout;
  // flows and dump run one at a time on the query worker, so this also bounds how long the next one waits).
  int64_t query_max_rows = 1000000;
  int64_t query_deadline_ms = 8000;
  std::string config;
  // Security (daemon/auth.hpp): the aggregator's CURVE secret key, the agents' and query clients'
  // allowlists; `insecure` (plain TCP, as before CURVE) only when asked for explicitly.
  std::string server_key, agents, clients;
  bool insecure = false;
};

// Parses argv (and the config file); nullopt to go on, else the exit code to return.
std::optional<int> parse_settings(int argc, char** argv, Settings& s);

}  // namespace netprism::daemon
