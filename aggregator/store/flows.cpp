#include "flows.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <tuple>

#include "netprism/addr.hpp"

namespace netprism::store {

std::optional<uint16_t> endpoint_port(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) != 0) return std::nullopt;
  auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < 6) return std::nullopt;
  unsigned v = 0;
  const char* b = endpoint.data() + colon + 1;
  const char* e = endpoint.data() + endpoint.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || v == 0 || v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

OwnTraffic own_traffic(Store& s) {
  OwnTraffic t;
  if (auto m = s.meta("own_ports")) {
    auto j = nlohmann::json::parse(*m, nullptr, false);
    if (j.is_array())
      for (auto& p : j)
        if (p.is_number_unsigned() && p.get<uint64_t>() <= 65535) t.ports.insert(p.get<uint16_t>());
  }
  return t;
}

void save_own_traffic(Store& s, const OwnTraffic& t) {
  s.set_meta("own_ports", nlohmann::json(t.ports).dump());
}

const char* proto_name(uint8_t proto) {
  switch (proto) {
    case NP_PROTO_TCP:
      return "tcp";
    case NP_PROTO_UDP:
      return "udp";
    case NP_PROTO_ROCE:
      return "roce";
  }
  return "unknown";
}

namespace {
void add_addrs(std::map<std::string, std::string>& out, const std::string& node,
               const std::vector<std::string>& addrs) {
  for (auto a : addrs) {
    if (auto slash = a.find('/'); slash != std::string::npos) a.resize(slash);
    if (auto pct = a.find('%'); pct != std::string::npos) a.resize(pct);  // fe80::1%eth0
    if (auto p = parse_addr(a)) out[format_addr(p->data())] = node;
  }
}
}  // namespace

std::map<std::string, std::string> addr_nodes(const std::vector<NodeRow>& nodes) {
  std::map<std::string, std::string> out;
  for (const auto& n : nodes)
    for (const auto& i : n.hello.interfaces) add_addrs(out, n.node, i.addrs);
  return out;
}

std::map<std::string, std::string> addr_nodes(
    const std::map<std::string, std::vector<std::string>>& node_addrs) {
  std::map<std::string, std::string> out;
  for (const auto& [node, addrs] : node_addrs) add_addrs(out, node, addrs);
  return out;
}

namespace {
struct Key {
  std::string node;
  Addr16 src, dst;
  uint16_t sport, dport;
  uint8_t proto;
  uint32_t qpn;
  auto tie() const { return std::tie(node, src, dst, sport, dport, proto, qpn); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};
struct Totals {
  uint64_t bytes = 0, payload = 0, packets = 0;
  uint64_t first = std::numeric_limits<uint64_t>::max(), last = 0;
};
// One RDMA port's counter totals over the range (agents' RdmaPortBursts): traffic the probe may not see.
struct PortTotals {
  uint64_t xmit = 0, rcv = 0, xmit_packets = 0, rcv_packets = 0;
  uint64_t first = std::numeric_limits<uint64_t>::max(), last = 0;
};
using PortKey = std::tuple<std::string, std::string, uint32_t>;  // node, device, port

nlohmann::json port_rows(const std::map<PortKey, PortTotals>& ports) {
  auto out = nlohmann::json::array();
  for (const auto& [k, t] : ports)
    out.push_back({{"node", std::get<0>(k)},
                   {"device", std::get<1>(k)},
                   {"port", std::get<2>(k)},
                   {"xmit_bytes", t.xmit},
                   {"rcv_bytes", t.rcv},
                   {"xmit_packets", t.xmit_packets},
                   {"rcv_packets", t.rcv_packets},
                   {"first_ns", t.first},
                   {"last_ns", t.last},
                   {"source", "counters"}});
  return out;
}
}  // namespace

nlohmann::json query_flows(Store& s, const FlowQuery& q, const OwnTraffic& own) {
  std::map<Key, Totals> agg;
  std::map<PortKey, PortTotals> ports;
  s.scan_batches(q.node, q.since, q.until, [&](const Batch& b, uint64_t) {
    for (const auto& r : b.rdma_bursts) {
      if (r.last_ns < q.since || r.first_ns > q.until) continue;
      auto& t = ports[{b.node, r.device, r.port}];
      t.xmit += r.xmit_bytes;
      t.rcv += r.rcv_bytes;
      t.xmit_packets += r.xmit_packets;
      t.rcv_packets += r.rcv_packets;
      t.first = std::min(t.first, r.first_ns);
      t.last = std::max(t.last, r.last_ns);
    }
    // Checked per batch (a few hundred flowlets): the clock read costs nothing next to the decode.
    if (q.deadline && std::chrono::steady_clock::now() > *q.deadline)
      throw QueryDeadline("flows query passed its deadline; narrow it with --node, --since/--until");
    for (const auto& f : b.flowlets) {
      if (f.last_ns < q.since || f.first_ns > q.until || own.matches(f)) continue;
      Key k{b.node, {}, {}, f.key.sport, f.key.dport, f.key.proto, f.key.qpn};
      std::copy(std::begin(f.key.saddr), std::end(f.key.saddr), k.src.begin());
      std::copy(std::begin(f.key.daddr), std::end(f.key.daddr), k.dst.begin());
      auto& t = agg[k];
      t.bytes += f.bytes;
      t.payload += f.payload_bytes;
      t.packets += f.packets;
      t.first = std::min<uint64_t>(t.first, f.first_ns);
      t.last = std::max<uint64_t>(t.last, f.last_ns);
    }
  });
  std::vector<std::pair<const Key*, const Totals*>> rows;
  rows.reserve(agg.size());
  for (const auto& [k, t] : agg) rows.emplace_back(&k, &t);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second->bytes > b.second->bytes; });
  std::size_t limit = q.limit;
  if (q.max_rows > 0 && (limit == 0 || limit > q.max_rows)) limit = q.max_rows;
  bool truncated = limit > 0 && rows.size() > limit;
  if (truncated) rows.resize(limit);
  auto flows = nlohmann::json::array();
  for (const auto& [k, t] : rows)
    flows.push_back({{"node", k->node},
                     {"src", format_addr(k->src.data())},
                     {"dst", format_addr(k->dst.data())},
                     {"src_port", k->sport},
                     {"dst_port", k->dport},
                     {"proto", proto_name(k->proto)},
                     {"qpn", k->qpn},
                     {"bytes", t->bytes},
                     {"payload_bytes", t->payload},
                     {"packets", t->packets},
                     {"first_ns", t->first},
                     {"last_ns", t->last},
                     {"source", "probe"}});
  nlohmann::json doc = {{"flows", flows}, {"truncated", truncated}, {"total_flows", agg.size()}};
  // RDMA port counters (source "counters"), present only when agents shipped any: flows are what the probe
  // saw (source "probe"); on a NIC that bypasses the kernel its RDMA traffic is only here.
  if (!ports.empty()) doc["rdma_ports"] = port_rows(ports);
  return doc;
}

}  // namespace netprism::store
