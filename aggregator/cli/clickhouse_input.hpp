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
#include "clickhouse/shard.hpp"

namespace netprism::cli {

// Analysis sharded by job (--shard K/N): clickhouse/shard.hpp.
using clickhouse::parse_shard;
using clickhouse::Shard;

std::optional<analysis::Input> load_clickhouse(const std::string& url, uint64_t since, uint64_t until,
                                               const Shard& shard, std::string& err);
// The `analyze` document ({"jobs": [...]}) of that input; topology ("" for none) names more addresses.
std::optional<nlohmann::json> analyze_clickhouse(const std::string& url, uint64_t since, uint64_t until,
                                                 const std::string& topology, const Shard& shard,
                                                 std::string& err);

}  // namespace netprism::cli
