#include "clickhouse_input.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "clickhouse/reader.hpp"
#include "feed.hpp"
#include "flows.hpp"
#include "netprism/addr.hpp"
#include "offline.hpp"
#include "topology.hpp"

namespace netprism::cli {

namespace {
// The nodes of shard's components (see Shard); nullopt with err.
std::optional<std::vector<std::string>> shard_nodes(const clickhouse::Reader& reader, uint64_t since,
                                                    uint64_t until,
                                                    const std::map<std::string, std::string>& addr_node,
                                                    const Shard& shard, std::string& err) {
  auto edges = reader.edges(since, until, err);
  if (!edges) return std::nullopt;
  std::map<std::string, std::string> parent;
  auto find = [&](std::string n) {
    while (parent.try_emplace(n, n).first->second != n) n = parent[n] = parent[parent[n]];
    return n;
  };
  auto join = [&](const std::string& a, const std::string& b) {
    auto ra = find(a), rb = find(b);
    if (ra != rb) parent[std::max(ra, rb)] = std::min(ra, rb);  // the root is the smallest name
  };
  for (const auto& e : *edges) {
    find(e.node);
    for (const auto* a : {&e.saddr, &e.daddr})
      if (auto it = addr_node.find(format_addr(a->data())); it != addr_node.end()) join(e.node, it->second);
  }
  std::vector<std::string> out;
  for (const auto& [node, _] : parent) {
    const std::string root = find(node);
    uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across builds and hosts, unlike std::hash
    for (unsigned char c : root) h = (h ^ c) * 1099511628211ull;
    if (h % shard.count == shard.index) out.push_back(node);
  }
  return out;
}
}  // namespace

std::optional<Shard> parse_shard(const std::string& text, std::string& err) {
  Shard s;
  char slash = 0, extra = 0;
  if (std::sscanf(text.c_str(), "%u%c%u%c", &s.index, &slash, &s.count, &extra) != 3 || slash != '/' ||
      s.count == 0 || s.index >= s.count) {
    err = "--shard must be K/N with 0 <= K < N (got '" + text + "')";
    return std::nullopt;
  }
  return s;
}

std::optional<analysis::Input> load_clickhouse(const std::string& url, uint64_t since, uint64_t until,
                                               const Shard& shard, std::string& err) {
  auto u = clickhouse::parse_url(url, err);
  if (!u) return std::nullopt;
  clickhouse::Reader reader(*u);
  auto addrs = reader.node_addrs(err);
  if (!addrs) return std::nullopt;
  auto ports = reader.own_ports(err);
  if (!ports) return std::nullopt;
  std::vector<store::NodeRow> nodes;
  for (auto& [node, list] : *addrs) {
    store::NodeRow n;
    n.node = node;
    n.hello.interfaces.push_back(InterfaceInfo{"", 0, list});
    nodes.push_back(std::move(n));
  }
  analysis::Input in;
  in.offline = true;  // as a recording (load_native)
  in.addr_node = store::addr_nodes(nodes);
  store::OwnTraffic own{*ports};
  std::vector<std::string> only;  // empty: every node
  if (shard.count > 1) {
    auto mine = shard_nodes(reader, since, until, in.addr_node, shard, err);
    if (!mine) return std::nullopt;
    if (mine->empty()) return in;  // no job falls to this shard
    only = std::move(*mine);
  }
  std::string node;  // the last row's, so a page's runs of one node share the text
  const bool ok = reader.scan(
      since, until,
      [&](const clickhouse::FlowletRow& row) {
        if (own.matches(row.f)) return;
        if (node != row.node) node = row.node;
        in.events.push_back(analysis::flow_event(node, row.f));
        in.now_ns = std::max<uint64_t>(in.now_ns, row.f.last_ns);
      },
      err, only);
  if (!ok) return std::nullopt;
  return in;
}

std::optional<nlohmann::json> analyze_clickhouse(const std::string& url, uint64_t since, uint64_t until,
                                                 const std::string& topology, const Shard& shard,
                                                 std::string& err) {
  auto in = load_clickhouse(url, since, until, shard, err);
  if (!in) return std::nullopt;
  if (!topology.empty() && !analysis::load_topology(topology, in->addr_node, err)) return std::nullopt;
  return jobs_document(analysis::analyze(*in));
}

}  // namespace netprism::cli
