// Stage 1: from observed events to node-level transfers.
//
// Agents see every transfer twice (the sender's egress, the receiver's ingress). Keeping both would double
// volumes and blur times, and mixing them per event would reorder bursts, so the choice is made per flow
// direction: the sender's own view when its agent saw it (its timestamps are when the data left, the
// moment the training process acted), otherwise one fixed observer (the smallest name), never both.
#include <algorithm>
#include <functional>
#include <tuple>
#include <unordered_map>

#include "netprism/flowlet.h"
#include "stages.hpp"

namespace netprism::analysis {
namespace {

uint64_t data_bytes(const FlowEvent& e) {
  return analysis::data_bytes(e.payload_bytes, e.dir, e.src.find(':') != std::string::npos, e.packets,
                              e.bytes);
}

// Interned strings (addresses, observers, node names) and the node each address maps to: one hash lookup
// per string per event, then integer comparisons.
class Names {
 public:
  Names(const Input& in, Normalized& out) : in_(in), out_(out) {}
  uint32_t intern(const std::string& x) {
    auto [pos, inserted] = str_idx_.try_emplace(x, static_cast<uint32_t>(strs_.size()));
    if (inserted) strs_.push_back(&pos->first);
    return pos->second;
  }
  const std::string& str(uint32_t id) const { return *strs_[id]; }
  // Node index of an address string id (nodes numbered by first lookup).
  uint32_t node_id(uint32_t addr) {
    if (node_of_str_.size() <= addr) node_of_str_.resize(strs_.size(), UINT32_MAX);
    if (node_of_str_[addr] == UINT32_MAX) node_of_str_[addr] = node_of(*strs_[addr]);
    return node_of_str_[addr];
  }
  // Node name of a node as a string id, so "the observer is the sender" is an integer comparison.
  uint32_t sender_sid(uint32_t node) {
    while (name_sid_.size() <= node) name_sid_.push_back(intern(out_.nodes[name_sid_.size()]));
    return name_sid_[node];
  }

 private:
  uint32_t node_of(const std::string& addr) {
    auto it = in_.addr_node.find(addr);
    const std::string& name = it == in_.addr_node.end() ? addr : it->second;
    auto [pos, inserted] = node_idx_.try_emplace(name, static_cast<uint32_t>(out_.nodes.size()));
    if (inserted) out_.nodes.push_back(name);
    return pos->second;
  }
  const Input& in_;
  Normalized& out_;
  std::unordered_map<std::string, uint32_t> node_idx_;
  std::unordered_map<std::string, uint32_t> str_idx_;
  std::vector<const std::string*> strs_;
  std::vector<uint32_t> node_of_str_;  // address string id -> node index (filled lazily)
  std::vector<uint32_t> name_sid_;
};

struct Flow {
  FlowKey key;
  uint32_t chosen;  // observer string id
  uint32_t conn = 0;
  bool fwd = true;  // the sender is the connection's first endpoint
};

struct Flows {
  std::vector<Flow> flows;
  std::vector<uint32_t> flow_of;  // per event
  std::vector<uint32_t> obs_of;   // per event: observer string id
};

// Pass 1: every event's flow direction (one hash lookup per event; everything else is per flow), and the
// observer kept for each: the sender's own when it saw it, else the smallest name.
Flows flow_directions(const Input& in, Names& names) {
  Flows f;
  f.flow_of.resize(in.events.size());
  f.obs_of.resize(in.events.size());
  std::unordered_map<FlowKey, uint32_t, KeyHash> flow_idx;
  for (size_t i = 0; i < in.events.size(); ++i) {
    const auto& e = in.events[i];
    uint32_t src = names.intern(e.src), dst = names.intern(e.dst), obs = names.intern(e.observer);
    f.obs_of[i] = obs;
    uint32_t sender = names.sender_sid(names.node_id(src));  // nodes numbered by first appearance as a sender
    FlowKey k{src, dst, e.src_port, e.dst_port, e.qpn, e.proto};
    auto [pos, inserted] = flow_idx.try_emplace(k, static_cast<uint32_t>(f.flows.size()));
    f.flow_of[i] = pos->second;
    if (inserted) {
      f.flows.push_back({k, obs});
      continue;
    }
    uint32_t& cur = f.flows[pos->second].chosen;
    if (cur == obs || cur == sender) continue;
    if (obs == sender || names.str(obs) < names.str(cur)) cur = obs;
  }
  return f;
}

// Connections (both directions of a 5-tuple, endpoints ordered by address and port), numbered in the order
// of their first event: flows are numbered that way, and a connection's first event is its first flow's.
void connections(std::vector<Flow>& flows, Names& names, Normalized& out) {
  std::unordered_map<ConnKey, uint32_t, KeyHash> conn_idx;
  for (Flow& fl : flows) {
    const FlowKey& k = fl.key;
    const std::string &sa = names.str(k.src), &da = names.str(k.dst);
    fl.fwd = !(std::tie(da, k.dport) < std::tie(sa, k.sport));
    ConnKey ck = fl.fwd ? ConnKey{k.src, k.dst, k.sport, k.dport, k.proto}
                        : ConnKey{k.dst, k.src, k.dport, k.sport, k.proto};
    auto [p, n] = conn_idx.try_emplace(ck, static_cast<uint32_t>(out.conns.size()));
    fl.conn = p->second;
    if (!n) continue;
    Conn c;
    uint32_t sn = names.node_id(k.src), dn = names.node_id(k.dst);
    c.a = fl.fwd ? sn : dn;
    c.b = fl.fwd ? dn : sn;
    c.addr_a = ck.a;
    c.addr_b = ck.b;
    c.proto = ck.proto;
    std::string s_end = sa + ":" + std::to_string(k.sport), d_end = da + ":" + std::to_string(k.dport);
    c.label = fl.fwd ? s_end + "<->" + d_end : d_end + "<->" + s_end;
    out.conns.push_back(std::move(c));
  }
}

// Pass 2: connection totals and transfers (the chosen observer's), and the receivers' own views (arrivals).
void transfers(const Input& in, const Flows& f, Names& names, Normalized& out) {
  uint64_t last_seen = 0;
  for (size_t i = 0; i < in.events.size(); ++i) {
    const auto& e = in.events[i];
    const Flow& fl = f.flows[f.flow_of[i]];
    Conn& c = out.conns[fl.conn];
    add_to_conn(c, e);
    last_seen = std::max(last_seen, e.last_ns);
    uint32_t src = fl.fwd ? c.a : c.b, dst = fl.fwd ? c.b : c.a;
    if (fl.chosen != f.obs_of[i]) {
      // The receiver's own view of a direction taken from its sender's: its arrival times (see arrivals).
      if (fl.chosen == names.sender_sid(names.node_id(fl.key.src)) &&
          f.obs_of[i] == names.sender_sid(names.node_id(fl.key.dst))) {
        uint64_t bytes = data_bytes(e);
        if (bytes > 0)
          out.arrivals.push_back(
              {src, dst, fl.conn, record_packets(e), e.first_ns, std::max(e.first_ns, e.last_ns), bytes});
      }
      continue;
    }
    uint64_t bytes = data_bytes(e);
    if (bytes == 0) continue;
    (fl.fwd ? c.bytes_ab : c.bytes_ba) += bytes;
    c.xfers++;
    out.xfers.push_back(
        {src, dst, fl.conn, record_packets(e), e.first_ns, std::max(e.first_ns, e.last_ns), bytes});
  }
  out.now_ns = in.now_ns ? in.now_ns : last_seen;
}

}  // namespace

Normalized normalize(const Input& in) {
  Normalized out;
  Names names(in, out);
  Flows f = flow_directions(in, names);
  connections(f.flows, names, out);
  transfers(in, f, names, out);
  auto by_time = [](const Xfer& x, const Xfer& y) {
    return std::tie(x.t0, x.t1, x.conn) < std::tie(y.t0, y.t1, y.conn);
  };
  // Recordings usually come in time order already; checking is cheaper than sorting again.
  if (!std::is_sorted(out.xfers.begin(), out.xfers.end(), by_time))
    std::sort(out.xfers.begin(), out.xfers.end(), by_time);
  if (!std::is_sorted(out.arrivals.begin(), out.arrivals.end(), by_time))
    std::sort(out.arrivals.begin(), out.arrivals.end(), by_time);
  out.offline = in.offline;
  return out;
}

}  // namespace netprism::analysis
