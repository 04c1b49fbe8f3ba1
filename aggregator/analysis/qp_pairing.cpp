// QP pairing (counters.hpp): node-to-node connections from every node's QP table.
//
// A reliable-connected QP names its peer only by number (RDMA_NLDEV_ATTR_RES_RQPN); the peer's node is not in
// the QP table. The QPs of a connection name each other, so QP x on node A (lqpn L, rqpn R) and QP y on node
// B (lqpn R, rqpn L) are the two ends of one connection. QPNs are per device and small (rxe and mlx5 hand
// them out in order), so two unrelated node pairs can carry the same numbers: when the CM table gave a row
// its addresses (rdma_cm users), the peer's address must belong to the other node; otherwise a QPN match with
// more than one candidate is ambiguous and left to the counters (counters_source.cpp).
#include <algorithm>
#include <set>
#include <tuple>
#include <unordered_map>

#include "counters.hpp"

namespace netprism::analysis {
namespace {

// One QP as seen over all reads of its node's table: the latest row and when it was last seen.
struct Qp {
  std::string node;
  const QpEntry* row = nullptr;
  uint64_t last_seen = 0;
};

// Connected QP types name a remote QP; datagram and raw QPs (UD, GSI, SMI, RAW_PACKET) do not.
bool connected(const QpEntry& q) {
  return q.rqpn != 0 && (q.type == "RC" || q.type == "UC" || q.type == "XRC_INI" || q.type == "XRC_TGT");
}

std::vector<Qp> unique_qps(const std::vector<NodeQp>& rows) {
  std::map<std::tuple<std::string, std::string, uint32_t, uint32_t>, Qp> by_key;
  for (const auto& r : rows) {
    if (!connected(r.qp)) continue;
    Qp& q = by_key[{r.node, r.qp.device, r.qp.lqpn, r.qp.rqpn}];
    if (q.row == nullptr || r.seen_ns >= q.last_seen) {
      q.node = r.node;
      q.row = &r.qp;
      q.last_seen = r.seen_ns;
    }
  }
  std::vector<Qp> out;
  for (auto& [k, q] : by_key) out.push_back(q);
  return out;
}

std::string node_of(const std::map<std::string, std::string>& addr_node, const std::string& addr) {
  auto it = addr_node.find(addr);
  return it == addr_node.end() ? addr : it->second;
}

// Whether y may be x's peer by the addresses either row carries (true when neither carries any).
bool addresses_agree(const Qp& x, const Qp& y, const std::map<std::string, std::string>& addr_node) {
  if (!x.row->dst_addr.empty() && node_of(addr_node, x.row->dst_addr) != y.node) return false;
  if (!y.row->dst_addr.empty() && node_of(addr_node, y.row->dst_addr) != x.node) return false;
  return true;
}

QpLink link_of(const Qp& x, const Qp& y, const std::map<std::string, uint64_t>& read_ns) {
  const Qp& lo = x.node < y.node ? x : y;
  const Qp& hi = x.node < y.node ? y : x;
  QpLink l;
  l.a = lo.node;
  l.b = hi.node;
  l.qpn_a = lo.row->lqpn;
  l.qpn_b = hi.row->lqpn;
  l.by_address = !x.row->dst_addr.empty() || !y.row->dst_addr.empty();
  l.last_seen_ns = std::min(x.last_seen, y.last_seen);
  auto read_after = [&](const Qp& q) {
    auto it = read_ns.find(q.node);
    return it != read_ns.end() && it->second > q.last_seen;
  };
  // Each end gone from a later read of its table, or left in RESET/ERR by the latest one that lists it.
  auto ended = [&](const Qp& q) { return read_after(q) || !qp_state_connected(q.row->state); };
  l.closed = ended(x) && ended(y);
  return l;
}

}  // namespace

QpPairing pair_qps(const std::vector<NodeQp>& qps, const std::map<std::string, std::string>& addr_node,
                   const std::map<std::string, uint64_t>& qp_read_ns) {
  QpPairing out;
  std::vector<Qp> all = unique_qps(qps);
  std::unordered_multimap<uint32_t, size_t> by_lqpn;
  for (size_t i = 0; i < all.size(); ++i) by_lqpn.emplace(all[i].row->lqpn, i);
  std::set<std::tuple<std::string, std::string, uint32_t, uint32_t>> seen;
  for (const Qp& x : all) {
    std::vector<const Qp*> cands;
    auto [lo, hi] = by_lqpn.equal_range(x.row->rqpn);
    for (auto it = lo; it != hi; ++it) {
      const Qp& y = all[it->second];
      if (y.node != x.node && y.row->rqpn == x.row->lqpn && addresses_agree(x, y, addr_node))
        cands.push_back(&y);
    }
    if (cands.empty()) {
      ++out.unpaired;
      continue;
    }
    if (cands.size() > 1) {
      QpPairing::Ambiguous amb{x.node, x.row->lqpn, {}};
      for (const Qp* y : cands) amb.candidates.push_back(link_of(x, *y, qp_read_ns));
      out.ambiguous.push_back(std::move(amb));
      continue;
    }
    QpLink l = link_of(x, *cands[0], qp_read_ns);
    if (seen.insert({l.a, l.b, l.qpn_a, l.qpn_b}).second) out.links.push_back(std::move(l));
  }
  // A pair unique from one end but ambiguous from the other is kept as the unique end found it; drop the
  // ambiguous entries whose QP ended up in a link.
  std::set<std::pair<std::string, uint32_t>> linked;
  for (const auto& l : out.links) {
    linked.insert({l.a, l.qpn_a});
    linked.insert({l.b, l.qpn_b});
  }
  std::erase_if(out.ambiguous, [&](const QpPairing::Ambiguous& a) {
    return linked.count({a.node, a.lqpn}) > 0;
  });
  std::sort(out.links.begin(), out.links.end(), [](const QpLink& x, const QpLink& y) {
    return std::tie(x.a, x.b, x.qpn_a, x.qpn_b) < std::tie(y.a, y.b, y.qpn_a, y.qpn_b);
  });
  return out;
}

}  // namespace netprism::analysis
