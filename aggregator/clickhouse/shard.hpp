// Analysis sharded by job (`netprism analyze --clickhouse --shard K/N`, `netprism-aggregator
// --analyze-from-clickhouse --shard K/N`): a job's nodes talk to each other, so jobs never straddle the
// connected components of the "who talked to whom" graph of nodes (asked of the server, aggregated there). A
// component belongs to shard FNV-1a(its smallest node name) % N, and shard K reads only its components'
// nodes' flowlets (a key-prefix read of the flowlets table): N analysers each take about 1/N of the jobs, and
// together give every job of the unsharded analysis. count 1: no sharding.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reader.hpp"

namespace netprism::clickhouse {

struct Shard {
  uint32_t index = 0, count = 1;
};
std::optional<Shard> parse_shard(const std::string& text, std::string& err);  // "K/N", 0 <= K < N

// The nodes of the shard's components over the flowlets overlapping [since, until] (addr_node names the
// addresses), sorted; nullopt with err. all: every node of the window, sorted.
std::optional<std::vector<std::string>> shard_nodes(const Reader& reader, uint64_t since, uint64_t until,
                                                    const std::map<std::string, std::string>& addr_node,
                                                    const Shard& shard, std::string& err,
                                                    std::vector<std::string>* all = nullptr);

}  // namespace netprism::clickhouse
