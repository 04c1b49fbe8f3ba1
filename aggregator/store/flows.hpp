// What the store's batches turn into for users: per-flow totals (`netprism flows`), and what decides which
// stored flowlets the analysis gets (netprism's own traffic is left out; addresses map to node names). The
// flowlets themselves become analysis events in analysis/feed.hpp: the store does not know the analysis.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "netprism/records.hpp"
#include "store.hpp"

namespace netprism::store {

// TCP/UDP ports that carry netprism's own traffic (agent ingest, CLI queries). The agent already excludes
// its traffic to the aggregator; filtering these ports here as well keeps a misconfigured agent (or one
// watching the aggregator host itself) from polluting flows and the analysis. A training job's own
// connections would only collide if they used these exact ports.
struct OwnTraffic {
  std::set<uint16_t> ports;
  bool matches(const Flowlet& f) const {
    return f.key.proto != NP_PROTO_ROCE && (ports.count(f.key.sport) || ports.count(f.key.dport));
  }
};
// The port of a ZeroMQ tcp endpoint ("tcp://host:7470"), if it has a numeric one.
std::optional<uint16_t> endpoint_port(const std::string& endpoint);
// Reads/writes the own-traffic ports in the store's meta table, so offline readers exclude them too.
OwnTraffic own_traffic(Store& s);
void save_own_traffic(Store& s, const OwnTraffic& t);

const char* proto_name(uint8_t proto);

// Address -> node name from every node's latest HELLO. Addresses are normalised (a "/prefix" suffix is cut,
// the text is re-formatted) so they match how flow events print them.
std::map<std::string, std::string> addr_nodes(const std::vector<NodeRow>& nodes);
// The same from registrations read elsewhere (ClickHouse's nodes table): node -> its addresses.
std::map<std::string, std::string> addr_nodes(
    const std::map<std::string, std::vector<std::string>>& node_addrs);

struct FlowQuery {
  std::optional<std::string> node;
  uint64_t since = 0;
  uint64_t until = std::numeric_limits<uint64_t>::max();
  std::size_t limit = 0;  // 0: no limit
  // Server-side bounds (the query endpoint's, issue 18): at most max_rows flows (truncated otherwise, like
  // limit), and a deadline after which the scan stops with QueryDeadline. 0 / nullopt: none.
  std::size_t max_rows = 0;
  std::optional<std::chrono::steady_clock::time_point> deadline;
};
// Thrown by query_flows when its deadline passes mid-scan.
struct QueryDeadline : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// {"flows": [...], "truncated": bool}: one entry per (node, flow key) seen in the range with totals over the
// range; sorted by bytes, largest first, so --limit keeps the heaviest flows.
nlohmann::json query_flows(Store& s, const FlowQuery& q, const OwnTraffic& own);

}  // namespace netprism::store
