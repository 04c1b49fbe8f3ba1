// The RDMA counters source (counters.hpp): per-node byte series from port bursts (counters_series.cpp), split
// among QP peers, turned into transfers.
// What still limits a timeline from counters: an iteration boundary (the end of a DP synchronisation) is
// known to within the sub-interval estimate of one edge, and a burst shorter than an interval cannot be
// placed inside it at all (its rate is unknown). Measured on recordings: tests/e2e/counters_derived.py.
#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "counters.hpp"
#include "counters_series.hpp"
#include "debug_log.hpp"
#include "netprism/flowlet.h"
#include "stats.hpp"

namespace netprism::analysis {
namespace {

// Runs of one pair's bins merge across gaps up to this (the split can leave a bin or two of a transfer to
// another peer where both were receiving).
constexpr uint64_t kMergeGapBins = 2;
// A peer's share of a node's bytes in one bin below this is taken for fitting noise, not a transfer, and
// given to the rest: a split by the priors' ratio would otherwise put a trickle of every DP synchronisation
// on the pipeline pairs beside it.
constexpr double kMinShare = 0.25;
// A bin of a pair's run under 1 % of the run's peak bin holds acknowledgements or tokens, not the transfer's
// data (dp4_1f1b's counters: 10-81 B per 1 ms bin after its last all-reduce, whose bins held 26 KB and more;
// the trailing intervals ended its last iteration 19 ms late).
constexpr double kTrickleShare = 0.01;
// Floor of a pair's prior, as a share of all unambiguous bytes (see evidence()).
constexpr double kPriorFloor = 1e-3;
// The split is fitted on a coarser grid than the series: one sampling interval (10 ms). Each node's counts
// there are exact sums of what it read (its intervals straddle two such bins, out of phase with its peers',
// spread alike on both ends of a transfer), so a sender's and its receivers' counts match bin by bin; on the
// 1 ms grid they would match only up to where each end's edge estimate put them. The shares fitted per
// coarse bin then split the sender's fine series.
constexpr uint64_t kFitBins = 10;
// Bytes sent while no QP peer was receiving in the same coarse bin go to the peers receiving in the
// neighbouring bins.
constexpr uint64_t kSearchBins = 1;
constexpr int kFitRounds = 30;
constexpr uint16_t kRoceV2Port = 4791;
// How far (coarse bins) from a bin of data the PSN advance that sent it may have been read: soft-RoCE
// advances a QP's PSN when it hands the packet to its interface, and an emulated interface drains slowly
// (run rbc6: 136 PSNs advanced within 15 ms, their bytes left eth0 over 70 ms; 20-100 ms in other runs). On
// a NIC the advance is the packet's departure, and the adjacent bins hold it.
constexpr uint64_t kPsnLagBins = 10;
// A QP pair whose PSN did not move near a bin keeps this much weight there (in packets): next to nothing,
// yet not excluded when the PSN reads and the port counters straddle a bin differently.
constexpr double kPsnFloor = 1e-3;
constexpr uint32_t kPsnMask = 0xffffff;  // PSNs are 24 bits
constexpr uint16_t kFin = 0x01;

using counters::kBinNs;
using counters::kRoceMtu;
using counters::NodeSeries;
using counters::Series;
using counters::spread;
using counters::value_at;
using counters::window_sum;

// Bytes sent by a and received by b at the same instants: how much of a pair's counters fit a transfer a->b.
double coactivity(const NodeSeries& a, const NodeSeries& b) {
  double sum = 0;
  for (const auto& [bin, x] : a.xmit) sum += std::min(x, value_at(b.rcv, bin));
  return sum;
}

// The ambiguous QPN matches resolved by the counters, one QP to one peer QP: candidates by how well the
// pair's counters fit a connection (best first), each QP used once (a QP has one remote end).
void resolve_ambiguous(QpPairing& p, const std::map<std::string, NodeSeries>& series) {
  static const NodeSeries kNone;
  auto of = [&](const std::string& n) -> const NodeSeries& {
    auto it = series.find(n);
    return it == series.end() ? kNone : it->second;
  };
  std::set<std::pair<std::string, uint32_t>> used;
  for (const auto& l : p.links) used.insert({l.a, l.qpn_a}), used.insert({l.b, l.qpn_b});
  std::vector<std::pair<double, const QpLink*>> cands;
  for (const auto& amb : p.ambiguous)
    for (const auto& c : amb.candidates)
      cands.push_back({coactivity(of(c.a), of(c.b)) + coactivity(of(c.b), of(c.a)), &c});
  std::stable_sort(cands.begin(), cands.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  for (const auto& [fit, c] : cands) {
    if (fit <= 0 || used.count({c->a, c->qpn_a}) || used.count({c->b, c->qpn_b})) continue;
    used.insert({c->a, c->qpn_a});
    used.insert({c->b, c->qpn_b});
    p.links.push_back(*c);
  }
}

struct Graph {
  std::vector<std::string> nodes;
  std::vector<std::vector<uint32_t>> peers;  // per node, sorted
  std::vector<NodeSeries> series;            // aligned with nodes
};

using PairSeries = std::map<std::pair<uint32_t, uint32_t>, Series>;  // (sender, receiver) -> bytes per bin
struct SplitSeries {
  // The senders' bytes split among their peers: data, what carried none, and the intervals of header-only
  // packets (NodeSeries::xmit_acks; a series of their own, refined from the senders' acknowledgement series).
  PairSeries data, no_data, acks;
};

// Size class of one bin's bytes: a factor of 4 per class. A pair's history is kept per class (see
// evidence()), so that a node's small pipeline sends and its large DP synchronisation are attributed each by
// the pairs that carried that kind of traffic alone.
int size_class(double bytes) {
  return bytes < 1 ? 0 : static_cast<int>(std::log2(bytes) / 2);
}
struct Prior {
  std::map<std::pair<uint32_t, uint32_t>, std::map<int, double>> ev;  // pair -> size class -> bytes
  double floor = 1;
  // Packets each QP pair carried per coarse bin, from its sender's PSN advancing between QP table reads
  // (QpEntry::sq_psn); senders whose tables carry PSNs are split by these alone.
  std::map<std::pair<uint32_t, uint32_t>, Series> psn;
  std::set<uint32_t> has_psn;
  double psn_weight(uint32_t i, uint32_t j, uint64_t bin) const {
    auto it = psn.find({i, j});
    if (it == psn.end()) return kPsnFloor;
    return kPsnFloor + value_at(it->second, bin) +
           0.5 * (value_at(it->second, bin + 1) + (bin ? value_at(it->second, bin - 1) : 0.0));
  }
  // The weight of pair (i, j) for a bin of `bytes` sent by i: its unambiguous bytes of that size class and,
  // at half weight, of the neighbouring ones.
  double at(uint32_t i, uint32_t j, double bytes) const {
    auto it = ev.find({i, j});
    if (it == ev.end()) return floor;
    int k = size_class(bytes);
    auto get = [&](int c) {
      auto x = it->second.find(c);
      return x == it->second.end() ? 0.0 : x->second;
    };
    double w = floor + get(k) + 0.5 * (get(k - 1) + get(k + 1));
    // Below the bulk classes, a node's bulk partner is not the likely receiver: the pairs that synchronise
    // gradients (bulk, every iteration) are not the ones that carry pipeline sends (small) in a DP x PP
    // layout, and the two kinds run at once in lockstep pipelines, where the counters alone fit either.
    if (auto b = bulk_share.find({i, j}); b != bulk_share.end() && k + 1 < bulk_class(i))
      w *= 1.0 - b->second;
    return w;
  }
  std::map<std::pair<uint32_t, uint32_t>, double> bulk_share;  // pair's share of its sender's bulk bytes
  std::map<uint32_t, int> bulk;                                // per sender: its bulk size class
  int bulk_class(uint32_t i) const {
    auto it = bulk.find(i);
    return it == bulk.end() ? 1000 : it->second;
  }
};

// Receivers for node i's bytes in (coarse) bin `bin`: its peers receiving then, or, when none is, the peers
// receiving in the neighbouring bins, weighted by what they received. Empty when none received anything near.
std::vector<std::pair<uint32_t, double>> receivers(const Graph& g, uint32_t i, uint64_t bin) {
  std::vector<std::pair<uint32_t, double>> out;
  for (uint64_t w : {uint64_t{0}, kSearchBins}) {
    for (uint32_t j : g.peers[i])
      if (double r = window_sum(g.series[j].rcv, bin, w); r > 0) out.push_back({j, r});
    if (!out.empty()) return out;
  }
  return out;
}

// Packets each of sender i's QP peers was sent near coarse bin `bin` (PSN advance): within a bin either side
// (Prior::psn_weight), or, up to `lag` bins away, at the nearest distance where any of them advanced. Empty:
// none advanced.
std::vector<std::pair<uint32_t, double>> psn_packets(const Graph& g, const Prior& prior, uint32_t i,
                                                     uint64_t bin, uint64_t lag) {
  std::vector<std::pair<uint32_t, double>> out;
  for (uint32_t j : g.peers[i])
    if (double w = prior.psn_weight(i, j, bin); w > kPsnFloor) out.push_back({j, w});
  for (uint64_t d = 2; out.empty() && d <= lag; ++d)
    for (uint32_t j : g.peers[i])
      if (double w = prior.psn_weight(i, j, bin + d) + (bin >= d ? prior.psn_weight(i, j, bin - d) : 0.0);
          w > 2 * kPsnFloor)
        out.push_back({j, w});
  return out;
}

// A sender's bytes in one bin split among its QP peers by the packets each QP sent (PSN advance). Packets are
// MTU-sized but for each message's last one: a peer's bytes are at most its packets x MTU, and each active
// peer's last packet is partial, so the bytes the MTUs overshoot the port's count by come off the peers
// evenly (one partial packet each), before the rest is scaled to the port's count.
bool split_by_packets(const Graph& g, const Prior& prior, uint32_t i, double x, uint64_t bin, uint64_t lag,
                      PairSeries& out) {
  std::vector<std::pair<uint32_t, double>> cap;
  double total = 0;
  for (auto [j, w] : psn_packets(g, prior, i, bin, lag)) {
    cap.push_back({j, w * kRoceMtu});
    total += w * kRoceMtu;
  }
  if (cap.empty() || total <= 0) return false;
  double over = std::max(0.0, total - x) / static_cast<double>(cap.size());
  double sum = 0;
  for (auto& [j, c] : cap) sum += (c = std::max(c - std::min(over, kRoceMtu), 0.0));
  if (sum <= 0) return false;
  for (auto [j, c] : cap) out[{i, j}][bin] += x * c / sum;
  return true;
}

// Bytes that cannot be placed as a transfer of one pair still went to one of the sender's peers: split by the
// prior (equally when no peer has any weight), as no data (SplitSeries::no_data; see fit_bin for when).
void split_as_no_data(const Graph& g, const Prior& prior, uint32_t i, double x, uint64_t bin,
                      PairSeries& out) {
  double sum = 0;
  for (uint32_t j : g.peers[i]) sum += prior.at(i, j, x);
  for (uint32_t j : g.peers[i])
    out[{i, j}][bin] += sum > 0 ? x * prior.at(i, j, x) / sum : x / static_cast<double>(g.peers[i].size());
}

// One bin's node-to-node matrix fitted to the senders' and receivers' bytes (iterative proportional
// fitting over QP-paired pairs, starting from `prior`), added to `out`. Senders keep their bytes exactly.
void fit_bin(const Graph& g, uint64_t bin, const std::vector<std::pair<uint32_t, double>>& senders,
             const Prior& prior, SplitSeries& out) {
  struct Cell {
    uint32_t i, j;
    double f;
  };
  std::vector<Cell> cells;
  std::map<uint32_t, double> target_row, target_col;
  for (auto [i, x] : senders) {
    // The sender's QPs say how many packets went to each peer: its bytes split in those proportions. None
    // advanced near the bin: no data then (ACKs advance no send PSN), as the probe's ACK-only bursts
    // (feed.cpp) -- unless the packets' sizes say data (counters_series.cpp): then the PSNs are read apart
    // from the wire (kPsnLagBins), and the nearest advance says the peer; none near, the receivers do.
    if (prior.has_psn.count(i)) {
      const bool data = value_at(g.series[i].xmit_data, bin) >= 0.5 * x;
      if (split_by_packets(g, prior, i, x, bin, data ? kPsnLagBins : 1, out.data)) continue;
      if (!data) {
        split_as_no_data(g, prior, i, x, bin, out.no_data);
        continue;
      }
    }
    auto rs = receivers(g, i, bin);
    if (rs.empty()) {  // no peer received near (its agent sampled late, or lost samples)
      split_as_no_data(g, prior, i, x, bin, out.no_data);
      continue;
    }
    target_row[i] = x;
    for (auto [j, r] : rs) {
      cells.push_back({i, j, r * prior.at(i, j, x)});
      target_col[j] = r;
    }
  }
  auto scale = [&](bool rows) {
    const auto& target = rows ? target_row : target_col;
    std::map<uint32_t, double> sum;
    for (const auto& c : cells) sum[rows ? c.i : c.j] += c.f;
    for (auto& c : cells) {
      uint32_t k = rows ? c.i : c.j;
      double t = target.at(k);
      if (sum[k] > 0 && t > 0) c.f *= t / sum[k];
    }
  };
  for (int round = 0; round < kFitRounds; ++round) {
    scale(false);
    scale(true);
  }
  // Drop fitting noise (a cell that is a small share of both its sender's and its receiver's bytes), keep the
  // sender's bytes whole. A small share of the sender's bytes that is most of what its receiver got is a
  // real transfer (a pipeline send in the same bin as the sender's DP synchronisation).
  auto kept_cell = [&](const Cell& c, double x) {
    double r = target_col.at(c.j);
    return c.f >= kMinShare * x || (r > 0 && c.f >= (1 - kMinShare) * r);
  };
  for (auto [i, x] : senders) {
    if (!target_row.count(i)) continue;  // split by its PSNs above
    double kept = 0;
    for (const auto& c : cells)
      if (c.i == i && kept_cell(c, x)) kept += c.f;
    for (const auto& c : cells)
      if (c.i == i && kept_cell(c, x) && kept > 0) out.data[{i, c.j}][bin] += c.f * x / kept;
    // No cell kept (no peer had weight for a bin this size: its only receiver is its bulk partner, and the
    // bin is below its bulk class): sent all the same, as no data.
    if (kept <= 0) split_as_no_data(g, prior, i, x, bin, out.no_data);
  }
}

SplitSeries split(const Graph& g, const Prior& prior) {
  std::map<uint64_t, std::vector<std::pair<uint32_t, double>>> senders_at;
  for (uint32_t i = 0; i < g.nodes.size(); ++i)
    if (!g.peers[i].empty())
      for (const auto& [bin, x] : g.series[i].xmit) senders_at[bin].push_back({i, x});
  SplitSeries out;
  for (const auto& [bin, senders] : senders_at) fit_bin(g, bin, senders, prior, out);
  for (uint32_t i = 0; i < g.nodes.size(); ++i)
    if (!g.peers[i].empty())
      for (const auto& [bin, x] : g.series[i].xmit_acks) split_as_no_data(g, prior, i, x, bin, out.acks);
  return out;
}

// The prior of the split: per pair, the bytes that could only have been that pair's -- sent while exactly one
// of the sender's QP peers was receiving, or received while exactly one of the receiver's peers was sending.
// Where a node's peers are all active at once (a DP synchronisation beside a pipeline send, or two DP rings
// at once) the marginals fit several matrices alike; the pairs' unambiguous history decides between them.
// A pair with none gets a small floor, so it is not excluded, only outweighed.
Prior evidence(const Graph& g) {
  Prior p;
  auto only_active = [&](uint32_t i, uint64_t bin, bool rcv) {
    uint32_t found = UINT32_MAX;
    for (uint32_t j : g.peers[i])
      if (value_at(rcv ? g.series[j].rcv : g.series[j].xmit, bin) > 0) {
        if (found != UINT32_MAX) return UINT32_MAX;
        found = j;
      }
    return found;
  };
  double total = 0;
  for (uint32_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& [bin, x] : g.series[i].xmit)
      if (uint32_t j = only_active(i, bin, true); j != UINT32_MAX)
        p.ev[{i, j}][size_class(x)] += x, total += x;
    for (const auto& [bin, r] : g.series[i].rcv)
      if (uint32_t j = only_active(i, bin, false); j != UINT32_MAX) {
        // The sender's class: its bytes in the bin, which the receiver's are (its only sending peer).
        double x = value_at(g.series[j].xmit, bin);
        p.ev[{j, i}][size_class(x)] += r, total += r;
      }
  }
  p.floor = kPriorFloor * std::max(total, 1.0);
  // Each sender's bulk class: the largest class holding at least a fifth of its unambiguous bytes; each
  // pair's share of the sender's bytes in that class and above.
  std::map<uint32_t, std::map<int, double>> per_sender;
  for (const auto& [k, m] : p.ev)
    for (const auto& [c, v] : m) per_sender[k.first][c] += v;
  for (const auto& [i, m] : per_sender) {
    double tot = 0;
    for (const auto& [c, v] : m) tot += v;
    for (auto it = m.rbegin(); it != m.rend(); ++it)
      if (it->second >= 0.2 * tot) {
        p.bulk[i] = it->first;
        break;
      }
    double in_bulk = 0;
    std::map<uint32_t, double> by_peer;
    for (const auto& [k, m2] : p.ev)
      if (k.first == i)
        for (const auto& [c, v] : m2)
          if (c >= p.bulk_class(i)) by_peer[k.second] += v, in_bulk += v;
    for (const auto& [j, v] : by_peer)
      if (in_bulk > 0) p.bulk_share[{i, j}] = v / in_bulk;
  }
  return p;
}

Graph graph_of(const QpPairing& p, std::map<std::string, NodeSeries> series,
               const std::set<std::pair<std::string, std::string>>& probe_pairs,
               const std::set<std::string>& probe_nodes) {
  Graph g;
  std::map<std::string, uint32_t> idx;
  auto id = [&](const std::string& n) {
    auto [it, fresh] = idx.try_emplace(n, static_cast<uint32_t>(g.nodes.size()));
    if (fresh) {
      g.nodes.push_back(n);
      g.peers.emplace_back();
      g.series.push_back(std::move(series[n]));
    }
    return it->second;
  };
  for (const auto& l : p.links) {
    if (probe_pairs.count({l.a, l.b}) || probe_nodes.count(l.a) || probe_nodes.count(l.b)) continue;
    uint32_t a = id(l.a), b = id(l.b);
    g.peers[a].push_back(b);
    g.peers[b].push_back(a);
  }
  for (auto& v : g.peers) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  return g;
}

// Per QP pair, the packets its sender's PSN advanced by between consecutive reads of its node's QP table,
// spread over each interval between reads on the coarse grid (Prior::psn).
void add_psn(Prior& p, const std::vector<NodeQp>& qps, const QpPairing& pairing, const Graph& g) {
  std::map<std::string, uint32_t> idx;
  for (uint32_t i = 0; i < g.nodes.size(); ++i) idx[g.nodes[i]] = i;
  std::map<std::pair<std::string, uint32_t>, std::string> peer_of;  // (node, lqpn) -> peer node
  for (const auto& l : pairing.links) {
    peer_of[{l.a, l.qpn_a}] = l.b;
    peer_of[{l.b, l.qpn_b}] = l.a;
  }
  std::map<std::tuple<std::string, std::string, uint32_t>, std::vector<std::pair<uint64_t, uint32_t>>> reads;
  for (const auto& q : qps)
    if (q.qp.sq_psn != 0 && peer_of.count({q.node, q.qp.lqpn}))
      reads[{q.node, q.qp.device, q.qp.lqpn}].push_back({q.seen_ns, q.qp.sq_psn});
  for (auto& [key, r] : reads) {
    const auto& [node, dev, lqpn] = key;
    auto i = idx.find(node), j = idx.find(peer_of.at({node, lqpn}));
    if (i == idx.end() || j == idx.end()) continue;
    std::sort(r.begin(), r.end());
    Series fine;
    for (size_t k = 1; k < r.size(); ++k) {
      uint32_t d = (r[k].second - r[k - 1].second) & kPsnMask;
      if (r[k].first > r[k - 1].first) spread(fine, r[k - 1].first, r[k].first, d);
    }
    p.has_psn.insert(i->second);
    Series& out = p.psn[{i->second, j->second}];
    for (const auto& [b, v] : fine) out[b / kFitBins] += v;
  }
}

Series coarse_of(const Series& s) {
  Series out;
  for (const auto& [b, v] : s) out[b / kFitBins] += v;
  return out;
}

Graph coarsen(const Graph& g) {
  Graph c;
  c.nodes = g.nodes;
  c.peers = g.peers;
  for (const auto& ns : g.series)
    c.series.push_back(
        {coarse_of(ns.xmit), coarse_of(ns.rcv), coarse_of(ns.xmit_data), coarse_of(ns.xmit_acks)});
  return c;
}

// The coarse split's shares applied to each sender's fine series (`sent`: NodeSeries::xmit or xmit_acks).
PairSeries refine(const Graph& fine, const PairSeries& coarse, Series NodeSeries::*sent) {
  PairSeries out;
  for (const auto& [pair, cs] : coarse) {
    const Series& x = fine.series[pair.first].*sent;
    Series& o = out[pair];
    for (const auto& [cb, bytes] : cs) {
      double total = 0;
      for (auto it = x.lower_bound(cb * kFitBins); it != x.end() && it->first < (cb + 1) * kFitBins; ++it)
        total += it->second;
      if (total <= 0) continue;
      for (auto it = x.lower_bound(cb * kFitBins); it != x.end() && it->first < (cb + 1) * kFitBins; ++it)
        o[it->first] += it->second * bytes / total;
    }
  }
  return out;
}

// One pair's series as transfers: runs of bins (merged across gaps up to kMergeGapBins), each timed by its
// bins of at least kTrickleShare of the run's peak (the rest count in its bytes). No-data runs get no
// payload.
void append_runs(const Series& s, bool data, const FlowEvent& proto, std::vector<FlowEvent>& out) {
  for (auto it = s.begin(); it != s.end();) {
    const auto run = it;
    uint64_t b1 = it->first;
    double bytes = 0, peak = 0;
    for (; it != s.end() && it->first <= b1 + kMergeGapBins + 1; ++it)
      b1 = it->first, bytes += it->second, peak = std::max(peak, it->second);
    uint64_t b0 = UINT64_MAX;
    for (auto j = run; j != it; ++j)
      if (j->second >= kTrickleShare * peak) b0 = std::min(b0, j->first), b1 = j->first;
    FlowEvent e = proto;
    e.first_ns = b0 * kBinNs;
    e.last_ns = (b1 + 1) * kBinNs;
    e.bytes = static_cast<uint64_t>(std::llround(bytes));
    e.payload_bytes = data ? e.bytes : 0;
    e.packets = std::max<uint64_t>(1, e.bytes / 4096);  // RoCE's usual MTU: only an order of magnitude
    if (e.bytes > 0) out.push_back(std::move(e));
  }
}

}  // namespace

std::vector<FlowEvent> counter_events(const Input& in) {
  std::vector<FlowEvent> out;
  if (in.rdma_bursts.empty()) return out;
  std::map<std::string, NodeSeries> series = counters::node_series(in.rdma_bursts);
  const auto interval_ms = counters::sampling_intervals_ms(in.rdma_bursts);
  auto interval_of = [&](const std::string& node) -> uint16_t {
    auto it = interval_ms.find(node);
    return it == interval_ms.end() ? 0 : it->second;
  };
  QpPairing pairing = pair_qps(in.qps, in.addr_node, in.qp_read_ns);
  resolve_ambiguous(pairing, series);
  // Node pairs whose RDMA traffic the probe saw itself, and each node's address (the first one its HELLO or
  // the topology gives, else its name) for the events' endpoints.
  auto node_of = [&](const std::string& addr) {
    auto it = in.addr_node.find(addr);
    return it == in.addr_node.end() ? addr : it->second;
  };
  // A node whose own probe saw RoCE sees all of its port's (a probe sees a port's RDMA or none of it:
  // soft-RoCE or a mirror, against a NIC that bypasses the kernel), so its port counters add nothing, and
  // their bytes split among the QP peers the probe did not name would be the probe's traffic counted again.
  // Records without an observer (a flow CSV without its node column) leave out their node pair only.
  std::set<std::pair<std::string, std::string>> probe_pairs;
  std::set<std::string> probe_nodes;
  for (const auto& e : in.events)
    if (e.proto == NP_PROTO_ROCE && !e.from_counters) {
      probe_pairs.insert(std::minmax(node_of(e.src), node_of(e.dst)));
      if (!e.observer.empty()) probe_nodes.insert(node_of(e.observer));
    }
  std::map<std::string, std::string> addr_of;
  for (const auto& [addr, node] : in.addr_node) addr_of.try_emplace(node, addr);
  std::set<std::pair<std::string, std::string>> closed;
  for (const auto& l : pairing.links)
    if (l.closed) closed.insert({l.a, l.b});

  Graph g = graph_of(pairing, std::move(series), probe_pairs, probe_nodes);
  Graph coarse = coarsen(g);
  Prior prior = evidence(coarse);
  add_psn(prior, in.qps, pairing, coarse);
  SplitSeries parts = split(coarse, prior);
  PairSeries data = refine(g, parts.data, &NodeSeries::xmit),
             no_data = refine(g, parts.no_data, &NodeSeries::xmit),
             acks = refine(g, parts.acks, &NodeSeries::xmit_acks);
  std::set<std::pair<uint32_t, uint32_t>> pairs;
  for (const auto* ps : {&data, &no_data, &acks})
    for (const auto& [pair, s] : *ps) pairs.insert(pair);
  for (const auto& pair : pairs) {
    const std::string &src = g.nodes[pair.first], &dst = g.nodes[pair.second];
    auto addr = [&](const std::string& n) { return addr_of.count(n) ? addr_of.at(n) : n; };
    FlowEvent e;
    e.observer = src;
    e.src = addr(src);
    e.dst = addr(dst);
    e.src_port = e.dst_port = kRoceV2Port;
    e.proto = NP_PROTO_ROCE;
    e.dir = NP_DIR_EGRESS;
    e.from_counters = true;
    e.counters_interval_ms = std::max(interval_of(src), interval_of(dst));
    size_t first = out.size();
    if (auto it = data.find(pair); it != data.end()) append_runs(it->second, true, e, out);
    for (const auto* ps : {&no_data, &acks})
      if (auto it = ps->find(pair); it != ps->end()) append_runs(it->second, false, e, out);
    auto by_end = [](const FlowEvent& a, const FlowEvent& b) { return a.last_ns < b.last_ns; };
    if (out.size() > first &&
        closed.count(std::minmax(src, dst)))  // the pair's last transfer carries its end
      std::max_element(out.begin() + static_cast<long>(first), out.end(), by_end)->tcp_flags |= kFin;
  }
  if (debug::lines_on()) {  // every byte the ports counted sent is in some transfer: in == out per node
    std::map<std::string, std::pair<double, double>> io;
    for (const auto& nb : in.rdma_bursts) io[nb.node].first += static_cast<double>(nb.burst.xmit_bytes);
    for (const auto& e : out) io[e.observer].second += static_cast<double>(e.bytes);
    for (const auto& [node, v] : io) {
      std::string l;
      debug::appendf(l, "counters: %s sent %.0f bytes, %.0f in transfers", node.c_str(), v.first, v.second);
      debug::line(l);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const FlowEvent& a, const FlowEvent& b) { return a.first_ns < b.first_ns; });
  return out;
}

}  // namespace netprism::analysis
