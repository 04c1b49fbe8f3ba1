// `netprism analyze --clickhouse URL [--since NS] [--until NS]`: everything every aggregator stored in
// ClickHouse for the window (clickhouse/reader.hpp), as the same analysis input a data dir gives
// (offline.hpp load_native: netprism's own ports left out, addresses named by the agents' registrations),
// analysed by the same analysis::analyze().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis.hpp"

namespace netprism::cli {

// Analysis sharded by job (`--shard K/N`): a job's nodes talk to each other, so jobs never straddle the
// connected components of the "who talked to whom" graph of nodes (asked of the server, aggregated there). A
// component belongs to shard hash(its smallest node name) % N, and shard K reads only its components' nodes'
// flowlets (a key-prefix read of the flowlets table): N analysers each take about 1/N of the jobs, and
// together give every job of the unsharded analysis. count 1: no sharding.
struct Shard {
  uint32_t index = 0, count = 1;
};
std::optional<Shard> parse_shard(const std::string& text, std::string& err);  // "K/N", 0 <= K < N

std::optional<analysis::Input> load_clickhouse(const std::string& url, uint64_t since, uint64_t until,
                                               const Shard& shard, std::string& err);
// The `analyze` document ({"jobs": [...]}) of that input; topology ("" for none) names more addresses.
std::optional<nlohmann::json> analyze_clickhouse(const std::string& url, uint64_t since, uint64_t until,
                                                 const std::string& topology, const Shard& shard,
                                                 std::string& err);

}  // namespace netprism::cli
