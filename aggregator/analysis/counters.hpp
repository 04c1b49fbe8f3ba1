// The RDMA counters source: transfers for the analysis made from what an agent can read when RDMA traffic
// never reaches its probe (hardware RoCE NICs): per-port byte counters (sampled every 10 ms in counters-only
// mode, shipped as one RdmaPortBurst per active sampling interval) and the QP table (RDMA netlink).
//
//   pair_qps       QP rows of all nodes -> node-to-node connections (an RC QP on node A whose remote QPN is
//                  a QP on node B that names A's QP back; addresses from the CM table confirm the pair)
//   counter_events per-node byte series + the pairing -> FlowEvents (proto roce, from_counters), one per run
//                  of activity of one node pair, which the existing stages (normalize -> ... -> diagnosis)
//                  take like the probe's flowlets.
//
// What per-port series cannot tell: which peer the bytes went to when a node talks to several peers at once.
// counter_events splits each instant's sent bytes among the node's QP peers that were receiving at that
// instant, fitting both sides' counters at once (iterative proportional fitting of the node-to-node matrix
// to every node's sent and received bytes, restricted to QP-paired pairs). Patterns whose marginals are the
// same either way stay ambiguous (a ring all-reduce in one direction or the other, both DP edges alike).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "analysis.hpp"

namespace netprism::analysis {

// One node-to-node connection made of QPs paired across two nodes.
struct QpLink {
  std::string a, b;  // nodes, a < b
  uint32_t qpn_a = 0, qpn_b = 0;
  bool by_address = false;  // the CM table's addresses confirm the pair (not only the QPNs)
  bool closed = false;      // both nodes read their tables after the pair's QPs were last seen
  uint64_t last_seen_ns = 0;
};

struct QpPairing {
  std::vector<QpLink> links;  // one per QP pair, sorted by (a, b, qpn_a)
  // QPN-only candidates that matched more than one peer QP (QPNs are per device and small: two node pairs
  // can use the same numbers): left out here, resolved by the counters in counter_events.
  struct Ambiguous {
    std::string node;
    uint32_t lqpn = 0;
    std::vector<QpLink> candidates;
  };
  std::vector<Ambiguous> ambiguous;
  size_t unpaired = 0;  // connected-type QPs with no peer QP in any node's table (peer without an agent)
};

// Pairs QP rows across nodes. addr_node maps addresses to nodes (HELLOs / topology), used when a row carries
// the CM table's addresses; qp_read_ns is each node's last table read (Input::qp_read_ns).
QpPairing pair_qps(const std::vector<NodeQp>& qps, const std::map<std::string, std::string>& addr_node,
                   const std::map<std::string, uint64_t>& qp_read_ns);

// Transfers made from the counters, for the node pairs the probe saw no RoCE traffic between (where the probe
// sees the RDMA packets, its flowlets are exact and win).
std::vector<FlowEvent> counter_events(const Input& in);

// RoCE connection ends (qp_teardown.cpp). RoCE has no FIN; a QP table read tells what a FIN would: a QP in a
// connected state (anything but RESET and ERR) still holds its connection.
bool qp_state_connected(const std::string& state);

// Which RoCE flows (the probe's per-QP flowlets, keyed by their destination QPN) have ended: their
// destination QP was listed in its node's QP table once, and the node's latest read, made after the flow's
// last packet, lists it no more or lists it in RESET/ERR. The same object serves a recording (everything
// added, then take()) and the daemon (added batch by batch, take() every pass): a hung job's QPs stay
// listed, so its flows never end here.
class QpTeardowns {
 public:
  // A node read its QP table at read_ns (Unix ns), listing what qp_row() then adds with the same time; a
  // read that lists nothing (every QP gone) is only this call.
  void table_read(const std::string& node, uint64_t read_ns);
  void qp_row(const std::string& node, uint64_t read_ns, const QpEntry& q);
  // An observed event (only the probe's RoCE ones count).
  void flow(const FlowEvent& e);
  // One teardown event per flow that has ended since the last call: zero bytes, FIN, at the flow's last
  // time, observed as the flow (the stages take it as a FIN closing the connection). Flows and QP rows
  // last seen before forget_before_ns are dropped unmarked (the daemon's window; 0 keeps all).
  std::vector<FlowEvent> take(const std::map<std::string, std::string>& addr_node, uint64_t forget_before_ns);

 private:
  struct Table {
    uint64_t read_ns = 0;                 // the latest read
    std::map<uint32_t, uint64_t> listed;  // lqpn -> last read listing it
    std::set<uint32_t> connected;         // listed by the latest read in a connected state
  };
  std::map<std::string, Table> tables_;  // by node
  // (observer, src, dst, src port, dst port, qpn) -> the flow's last event
  std::map<std::tuple<std::string, std::string, std::string, uint16_t, uint16_t, uint32_t>, FlowEvent> flows_;
};

// The counters source in the daemon (counters_live.cpp): bursts and QP rows added batch by batch; take()
// hands the streaming engine counter_events() of each segment of the port series that has settled (older
// than the agents' delivery lag, ending at an instant every port was quiet), plus a zero-byte FIN for a
// node pair whose QPs closed after its last event was handed over.
class LiveCounters {
 public:
  void burst(const std::string& node, const RdmaPortBurst& b);
  void qp_row(const std::string& node, uint64_t read_ns, const QpEntry& q);
  void table_read(const std::string& node, uint64_t read_ns);
  void probe_flow(const FlowEvent& e);  // the probe's RoCE flows: their node pairs are not counted twice
  std::vector<FlowEvent> take(uint64_t now_ns, const std::map<std::string, std::string>& addr_node);
  bool empty() const { return bursts_.empty() && latest_.empty(); }

 private:
  uint64_t quiet_cut(uint64_t upto) const;
  void add_latest(Input& in) const;                          // every QP's latest row, without PSN
  static constexpr uint64_t kForgetNs = 600'000'000'000ull;  // the daemon's default analysis window
  struct Sent {
    std::string observer;
    uint64_t last_ns = 0;
    bool fin = false;
  };
  std::vector<NodePortBurst> bursts_;  // not yet in a segment
  std::vector<NodeQp> rows_;           // read after the last cut
  std::map<std::tuple<std::string, std::string, uint32_t, uint32_t>, NodeQp> latest_;  // per QP
  std::map<std::string, uint64_t> read_ns_;                                            // latest read per node
  std::set<std::tuple<std::string, std::string, std::string>>
      probe_pairs_;                                           // observer, src and dst addresses
  std::map<std::pair<std::string, std::string>, Sent> sent_;  // (src, dst) address -> events handed over
  uint64_t cut_ns_ = 0;                                       // segments end here so far
};

// Teardown events for a recording: QpTeardowns over all of `in`.
std::vector<FlowEvent> qp_teardown_events(const Input& in);

}  // namespace netprism::analysis
