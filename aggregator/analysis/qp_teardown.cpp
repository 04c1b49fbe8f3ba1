// RoCE connection ends from the QP tables (counters.hpp: QpTeardowns).
//
// RoCE carries no FIN: when a training process exits, its QPs are destroyed (the kernel does it for a
// process that dies) and the wire simply goes quiet, exactly as in a hang. What differs is the QP table an
// agent reads over RDMA netlink: after a normal end the QPs are gone from it, or left in ERR (flushed, e.g.
// by a peer's teardown) or RESET; in a hang they stay listed in a connected state (RTS). So a RoCE flow
// whose destination QP (the BTH's, the flowlet's qpn) its node's latest table read no longer lists as
// connected, read after the flow's last packet, has ended, as a FIN ends a TCP connection: it gets a
// teardown event (zero bytes, FIN, at the flow's last time) that the stages take like a FIN.
#include <algorithm>

#include "counters.hpp"
#include "netprism/flowlet.h"

namespace netprism::analysis {
namespace {

constexpr uint16_t kFin = 0x01;

}  // namespace

bool qp_state_connected(const std::string& state) {
  // enum ib_qp_state: RESET (created, or reset: no connection), INIT, RTR, RTS, SQD, SQE (the send queue
  // failed; the QP can be brought back to RTS), ERR (flushed: every work request completes in error until
  // the QP is reset). An empty state (older agents) is taken as connected: no evidence of an end.
  return state != "RESET" && state != "ERR";
}

void QpTeardowns::table_read(const std::string& node, uint64_t read_ns) {
  Table& t = tables_[node];
  if (read_ns <= t.read_ns) return;
  t.read_ns = read_ns;
  t.connected.clear();  // a newer read: what it lists replaces what the last one listed
}

void QpTeardowns::qp_row(const std::string& node, uint64_t read_ns, const QpEntry& q) {
  table_read(node, read_ns);
  Table& t = tables_[node];
  uint64_t& listed = t.listed[q.lqpn];
  listed = std::max(listed, read_ns);
  // An older read arriving late (a resent batch) says nothing about now: the latest read does.
  if (read_ns == t.read_ns && qp_state_connected(q.state)) t.connected.insert(q.lqpn);
}

void QpTeardowns::flow(const FlowEvent& e) {
  if (e.proto != NP_PROTO_ROCE || e.from_counters) return;
  FlowEvent& f = flows_[{e.observer, e.src, e.dst, e.src_port, e.dst_port, e.qpn}];
  if (e.last_ns < f.last_ns) return;
  f = e;
}

std::vector<FlowEvent> QpTeardowns::take(const std::map<std::string, std::string>& addr_node,
                                         uint64_t forget_before_ns) {
  std::vector<FlowEvent> out;
  for (auto it = flows_.begin(); it != flows_.end();) {
    const FlowEvent& f = it->second;
    auto node = addr_node.find(f.dst);
    auto t = tables_.find(node == addr_node.end() ? f.dst : node->second);
    // Ended: the destination QP was listed once, and the node's latest read, made after the flow's last
    // packet, no longer lists it as connected.
    bool ended = t != tables_.end() && t->second.read_ns >= f.last_ns && t->second.listed.count(f.qpn) &&
                 !t->second.connected.count(f.qpn);
    if (!ended && f.last_ns >= forget_before_ns) {
      ++it;
      continue;
    }
    if (ended) {
      FlowEvent e;
      static_cast<EventFields&>(e) = f;
      e.observer = f.observer;
      e.src = f.src;
      e.dst = f.dst;
      e.first_ns = e.last_ns = f.last_ns;
      e.bytes = e.payload_bytes = e.packets = 0;
      e.tcp_flags = kFin;
      out.push_back(std::move(e));
    }
    it = flows_.erase(it);  // told once; traffic on it again makes it a flow again
  }
  for (auto& [node, t] : tables_)
    std::erase_if(t.listed, [&](const auto& kv) { return kv.second < forget_before_ns; });
  return out;
}

std::vector<FlowEvent> qp_teardown_events(const Input& in) {
  QpTeardowns t;
  for (const auto& [node, ns] : in.qp_read_ns) t.table_read(node, ns);
  for (const auto& q : in.qps) t.qp_row(q.node, q.seen_ns, q.qp);
  for (const auto& e : in.events) t.flow(e);
  return t.take(in.addr_node, 0);
}

}  // namespace netprism::analysis
