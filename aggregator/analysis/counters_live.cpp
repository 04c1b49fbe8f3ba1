// The RDMA counters source in the daemon (counters.hpp: LiveCounters).
//
// counter_events() reads a whole recording: runs of activity, the split among peers, FIN on closed pairs.
// Live, bursts and QP rows arrive batch by batch, and an event handed to the streaming engine cannot be
// taken back. So the live form cuts the port series into segments at instants when every port of every node
// was quiet (no run of activity can straddle such an instant, so cutting there changes no event), each
// segment once it is older than the agents' delivery lag, and runs counter_events() on each segment with
// the QP rows read during it (the PSN split) and the latest row of every QP (the pairing, closures).
#include <algorithm>
#include <string>
#include <utility>

#include "counters.hpp"
#include "netprism/flowlet.h"

namespace netprism::analysis {
namespace {

constexpr uint16_t kFin = 0x01;
// A segment ends at a quiet of at least two sampling intervals (10 ms) on every port: counter_events()
// merges a pair's activity across gaps of 2 ms at most, so no event spans such a quiet.
constexpr uint64_t kQuietNs = 20'000'000;
// Data older than this is complete: agents ship within their 100 ms batch flush (a spool replay after an
// outage arrives later and is then analysed in the segment it lands in, as a late flowlet is).
constexpr uint64_t kLagNs = 1'000'000'000;
// Traffic without any quiet for this long is cut anyway (bounds memory); 10 s is longer than any training
// step measured here (0.1-2 s) and than a pipeline's busiest stretch.
constexpr uint64_t kMaxSegmentNs = 10'000'000'000ull;

}  // namespace

void LiveCounters::burst(const std::string& node, const RdmaPortBurst& b) {
  if (b.last_ns < cut_ns_) return;  // older than a segment already analysed: too late to place
  bursts_.push_back({node, b});
}

void LiveCounters::qp_row(const std::string& node, uint64_t read_ns, const QpEntry& q) {
  NodeQp r{node, read_ns, q};
  auto key = std::make_tuple(node, q.device, q.lqpn, q.rqpn);
  auto [it, fresh] = latest_.try_emplace(key, r);
  if (!fresh && it->second.seen_ns <= read_ns) it->second = r;
  rows_.push_back(std::move(r));
}

void LiveCounters::table_read(const std::string& node, uint64_t read_ns) {
  uint64_t& t = read_ns_[node];
  t = std::max(t, read_ns);
}

void LiveCounters::probe_flow(const FlowEvent& e) {
  if (e.proto == NP_PROTO_ROCE && !e.from_counters) probe_pairs_.insert({e.observer, e.src, e.dst});
}

void LiveCounters::add_latest(Input& in) const {
  for (const auto& [k, r] : latest_) {
    in.qps.push_back(r);
    in.qps.back().qp.sq_psn = in.qps.back().qp.rq_psn = 0;  // add_psn skips rows without a PSN
  }
}

uint64_t LiveCounters::quiet_cut(uint64_t upto) const {
  // The latest instant <= upto with no burst within kQuietNs before it, scanning the bursts by start.
  std::vector<std::pair<uint64_t, uint64_t>> iv;
  for (const auto& b : bursts_)
    if (b.burst.first_ns < upto) iv.emplace_back(b.burst.first_ns, b.burst.last_ns);
  if (iv.empty()) return 0;
  std::sort(iv.begin(), iv.end());
  uint64_t cut = 0, end = iv[0].second;
  for (size_t i = 1; i < iv.size(); ++i) {
    if (iv[i].first >= end + kQuietNs) cut = end + kQuietNs;
    end = std::max(end, iv[i].second);
  }
  if (upto >= end + kQuietNs) cut = end + kQuietNs;
  if (cut == 0 && iv.front().first + kMaxSegmentNs < upto) cut = upto;
  return cut;
}

std::vector<FlowEvent> LiveCounters::take(uint64_t now_ns,
                                          const std::map<std::string, std::string>& addr_node) {
  std::vector<FlowEvent> out;
  const uint64_t cut = now_ns > kLagNs ? quiet_cut(now_ns - kLagNs) : 0;
  Input in;
  in.addr_node = addr_node;
  in.qp_read_ns = read_ns_;
  for (const auto& [observer, src, dst] : probe_pairs_) {
    FlowEvent e;
    e.observer = observer;
    e.src = src;
    e.dst = dst;
    e.proto = NP_PROTO_ROCE;
    in.events.push_back(std::move(e));
  }
  if (cut > cut_ns_) {
    auto seg = std::stable_partition(bursts_.begin(), bursts_.end(),
                                     [&](const NodePortBurst& b) { return b.burst.last_ns < cut; });
    in.rdma_bursts.assign(bursts_.begin(), seg);
    bursts_.erase(bursts_.begin(), seg);
    // The rows read during the segment, and the last read before it (its PSNs: packets per interval
    // between reads), and the latest row of every QP without its PSN (pairing and closure only: a PSN read
    // after the segment would spread later packets over its last interval).
    std::map<std::tuple<std::string, std::string, uint32_t, uint32_t>, uint64_t> last_in;
    for (const auto& r : rows_)
      if (r.seen_ns < cut) {
        in.qps.push_back(r);
        uint64_t& t = last_in[{r.node, r.qp.device, r.qp.lqpn, r.qp.rqpn}];
        t = std::max(t, r.seen_ns);
      }
    add_latest(in);
    out = counter_events(in);
    cut_ns_ = cut;
    // What the next segment needs of these rows: each QP's last read before the cut.
    std::erase_if(rows_, [&](const NodeQp& r) {
      return r.seen_ns < cut && r.seen_ns < last_in[{r.node, r.qp.device, r.qp.lqpn, r.qp.rqpn}];
    });
  } else {
    add_latest(in);
  }
  // Pairs whose QPs closed after their last event: that event was handed over without FIN; a zero-byte
  // FIN at the pair's last time closes them now (as qp_teardown.cpp does for the probe's flows).
  for (const auto& e : out) {
    Sent& s = sent_[{e.src, e.dst}];
    s.observer = e.observer;
    s.last_ns = std::max(s.last_ns, e.last_ns);
    s.fin = s.fin || (e.tcp_flags & kFin);
  }
  QpPairing p = pair_qps(in.qps, addr_node, read_ns_);
  auto node_of = [&](const std::string& a) {
    auto it = addr_node.find(a);
    return it == addr_node.end() ? a : it->second;
  };
  for (auto& [pair, s] : sent_) {
    if (s.fin) continue;
    // Named values, not std::minmax of the temporaries (it returns references to them) nor a structured
    // binding (clang 14, which the fuzz and sanitizer builds use, cannot capture one in a lambda).
    std::string a = node_of(pair.first), b = node_of(pair.second);
    if (b < a) std::swap(a, b);
    bool closed = std::any_of(p.links.begin(), p.links.end(),
                              [&](const QpLink& l) { return l.closed && l.a == a && l.b == b; });
    if (!closed) continue;
    FlowEvent e;
    e.observer = s.observer;
    e.src = pair.first;
    e.dst = pair.second;
    e.src_port = e.dst_port = 4791;
    e.proto = NP_PROTO_ROCE;
    e.dir = NP_DIR_EGRESS;
    e.from_counters = true;
    e.first_ns = e.last_ns = s.last_ns;
    e.tcp_flags = kFin;
    out.push_back(std::move(e));
    s.fin = true;
  }
  // QPs gone for a window are forgotten (the daemon's window: 600 s; a closed pair stays closed).
  const uint64_t forget = now_ns > kForgetNs ? now_ns - kForgetNs : 0;
  std::erase_if(latest_, [&](const auto& kv) { return kv.second.seen_ns < forget; });
  std::erase_if(sent_, [&](const auto& kv) { return kv.second.last_ns < forget; });
  return out;
}

}  // namespace netprism::analysis
