#include "clickhouse_input.hpp"

#include <algorithm>
#include <map>

#include "clickhouse/reader.hpp"
#include "clickhouse/shard.hpp"
#include "feed.hpp"
#include "flows.hpp"
#include "netprism/addr.hpp"
#include "offline.hpp"
#include "topology.hpp"

namespace netprism::cli {

std::optional<analysis::Input> load_clickhouse(const std::string& url, uint64_t since, uint64_t until,
                                               const Shard& shard, std::string& err) {
  auto u = clickhouse::parse_url(url, err);
  if (!u) return std::nullopt;
  clickhouse::Reader reader(*u);
  auto addrs = reader.node_addrs(err);
  if (!addrs) return std::nullopt;
  auto ports = reader.own_ports(err);
  if (!ports) return std::nullopt;
  analysis::Input in;
  in.offline = true;  // as a recording (load_native)
  in.addr_node = store::addr_nodes(*addrs);
  store::OwnTraffic own{*ports};
  std::vector<std::string> only;  // empty: every node
  if (shard.count > 1) {
    auto mine = clickhouse::shard_nodes(reader, since, until, in.addr_node, shard, err);
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
  // Counters-only agents' RDMA records (the counters source of analyze(), as for a recording).
  if (!reader.scan_rdma(
          since, until, [&](Batch&& b) { add_rdma(b, in); }, err, only))
    return std::nullopt;
  std::erase_if(in.rdma_bursts, [&](const analysis::NodePortBurst& b) {  // as clip() does a recording's
    return b.burst.last_ns < since || b.burst.first_ns > until;
  });
  for (const auto& b : in.rdma_bursts) in.now_ns = std::max(in.now_ns, b.burst.last_ns);
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
