// Per-node byte series of the RDMA counters source (counters_series.hpp).
// Resolution. Counters-only agents sample every 10 ms, so a port's series says how many bytes moved in each
// 10 ms interval, not when inside it. Two things recover time inside an interval:
//  - a 1 ms grid: each node's intervals are placed on it as they were sampled (agents sample out of phase
//    with one another), so the split (counters_source.cpp) compares senders and receivers at 1 ms;
//  - line-rate edges: the first and last interval of a run of activity usually hold less than a full
//    interval's bytes; at the run's peak rate those bytes take only part of the interval, placed against the
//    run (a run starts late in its first interval, ends early in its last). Collectives and pipeline sends
//    run at line rate while they run, so the run's peak rate is their rate.
// What an interval carried. A port counts every packet it sends, acknowledgements included. Where it counts
// packets as well as bytes, their mean size tells the two apart: an RC acknowledgement is headers only (see
// kAckBytes), a data packet carries up to the path MTU (256-4096 B) more. An interval is data when its
// packets average at least twice a header-only packet (its payload is then at least half its bytes); below
// that it held acknowledgements (and messages too small to time anything by). This needs no clock but the
// port's own: the QPs' PSNs (counters_source.cpp) say which peer the data went to, and where the PSNs are
// read late or early against the wire, they need not say whether it was data.
#include "counters_series.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "stats.hpp"

namespace netprism::analysis::counters {
namespace {

// A header-only RoCEv2 packet on an IPv4 wire: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + AETH 4 + ICRC 4 =
// 62 B, an RC acknowledgement (IPv6: 82 B; a VLAN tag: +4). The VMs' soft-RoCE interfaces counted exactly
// 62 B per packet in every acknowledgement-only interval (rdmabed counters-only runs).
constexpr double kAckBytes = 62;

enum class Carries { unknown, data, acks };

// What an interval of `bytes` in `packets` carried. Unknown without a packet count (the port counts none, or
// its bytes and packets were read on either side of the packets' moment: a count of 0 beside bytes).
Carries carries(uint64_t bytes, uint64_t packets) {
  if (bytes == 0 || packets == 0) return Carries::unknown;
  return static_cast<double>(bytes) >= 2 * kAckBytes * static_cast<double>(packets) ? Carries::data
                                                                                    : Carries::acks;
}

struct Interval {
  uint64_t t0, t1;
  double bytes;
  Carries what;
};

// Where an interval's bytes go: xmit (with xmit_data for data), xmit_acks; received acknowledgements are
// left out of rcv (the split matches senders' data with receivers').
void add(NodeSeries& ns, bool sent, const Interval& iv, uint64_t t0, uint64_t t1) {
  if (!sent) {
    if (iv.what != Carries::acks) spread(ns.rcv, t0, t1, iv.bytes);
    return;
  }
  if (iv.what == Carries::acks) return spread(ns.xmit_acks, t0, t1, iv.bytes);
  spread(ns.xmit, t0, t1, iv.bytes);
  if (iv.what == Carries::data) spread(ns.xmit_data, t0, t1, iv.bytes);
}

// One port's intervals of one direction (sorted, adjacent ones forming runs) onto the grid, with line-rate
// edges (see the file comment).
void place_port(const std::vector<Interval>& iv, bool sent, NodeSeries& out) {
  for (size_t i = 0; i < iv.size();) {
    size_t j = i + 1;
    while (j < iv.size() && iv[j].t0 <= iv[j - 1].t1) ++j;
    double peak = 0;
    for (size_t k = i; k < j; ++k)
      if (iv[k].t1 > iv[k].t0) peak = std::max(peak, iv[k].bytes / static_cast<double>(iv[k].t1 - iv[k].t0));
    for (size_t k = i; k < j; ++k) {
      uint64_t t0 = iv[k].t0, t1 = iv[k].t1;
      uint64_t need = peak > 0 ? static_cast<uint64_t>(std::ceil(iv[k].bytes / peak)) : t1 - t0;
      need = std::min(need, t1 - t0);
      if (j - i > 1 && k == i)
        t0 = t1 - need;  // the run starts late in its first interval
      else if (j - i > 1 && k + 1 == j)
        t1 = t0 + need;  // and ends early in its last
      add(out, sent, iv[k], t0, t1);
    }
    i = j;
  }
}

}  // namespace

void spread(Series& s, uint64_t t0, uint64_t t1, double bytes) {
  if (bytes <= 0) return;
  if (t1 <= t0) {
    s[t0 / kBinNs] += bytes;
    return;
  }
  const double per_ns = bytes / static_cast<double>(t1 - t0);
  for (uint64_t b = t0 / kBinNs; b * kBinNs < t1; ++b) {
    uint64_t lo = std::max(t0, b * kBinNs), hi = std::min(t1, (b + 1) * kBinNs);
    s[b] += per_ns * static_cast<double>(hi - lo);
  }
}

double value_at(const Series& s, uint64_t bin) {
  auto it = s.find(bin);
  return it == s.end() ? 0 : it->second;
}

double window_sum(const Series& s, uint64_t bin, uint64_t w) {
  double sum = 0;
  for (auto it = s.lower_bound(bin > w ? bin - w : 0); it != s.end() && it->first <= bin + w; ++it)
    sum += it->second;
  return sum;
}

// Each node's sampling interval: its agent ships one burst per active interval, so the median burst length
// (ms, rounded up). A transfer made from the series carries it (EventFields::counters_interval_ms): one
// shorter than two intervals has no rate of its own. A run of one interval is given that whole interval (its
// peak rate is its own bytes over it), so its "rate" is its volume over the interval; from two intervals
// on, a full one sets the run's peak, the rate at which it ran (see place_port). OpenMPI DP4's 4-6 ms
// exchanges, read as rates, put the pairs carrying half the bytes at 0.5x the others: a false slow_link.
std::map<std::string, uint16_t> sampling_intervals_ms(const std::vector<NodePortBurst>& bursts) {
  std::map<std::string, std::vector<double>> lengths;
  for (const auto& nb : bursts)
    if (nb.burst.last_ns > nb.burst.first_ns)
      lengths[nb.node].push_back(static_cast<double>(nb.burst.last_ns - nb.burst.first_ns));
  std::map<std::string, uint16_t> out;
  for (auto& [node, v] : lengths)
    out[node] = static_cast<uint16_t>(std::clamp(std::ceil(median(std::move(v)) / 1e6), 1.0, 65535.0));
  return out;
}

std::map<std::string, NodeSeries> node_series(const std::vector<NodePortBurst>& bursts) {
  using Port = std::tuple<std::string, std::string, uint32_t>;
  std::map<Port, std::pair<std::vector<Interval>, std::vector<Interval>>> ports;
  std::set<Port> counts_bytes;
  for (const auto& nb : bursts)
    if (nb.burst.xmit_bytes || nb.burst.rcv_bytes)
      counts_bytes.insert({nb.node, nb.burst.device, nb.burst.port});
  for (const auto& nb : bursts) {
    const RdmaPortBurst& b = nb.burst;
    const Port port{nb.node, b.device, b.port};
    auto& [x, r] = ports[port];
    // Soft-RoCE has no byte counters: its agent ships its interface's (agent/rdma/sysfs.hpp) or, without
    // them, packets alone, and packets x MTU stand for its bytes (volumes are compared among peers, which
    // share the MTU; what they carried is then unknown). A port that counts bytes and shows packets without
    // bytes in an interval had them read on either side of its packets: its bytes are in the next interval
    // (as packets x MTU they were counted twice: 229 KB too many of a soft-RoCE run's 4.3 MB).
    const bool bytes_counted = counts_bytes.count(port) > 0;
    auto interval = [&](uint64_t bytes, uint64_t pk) {
      return bytes_counted
                 ? Interval{b.first_ns, b.last_ns, static_cast<double>(bytes), carries(bytes, pk)}
                 : Interval{b.first_ns, b.last_ns, static_cast<double>(pk) * kRoceMtu, Carries::unknown};
    };
    if (Interval v = interval(b.xmit_bytes, b.xmit_packets); v.bytes > 0) x.push_back(v);
    if (Interval v = interval(b.rcv_bytes, b.rcv_packets); v.bytes > 0) r.push_back(v);
  }
  std::map<std::string, NodeSeries> out;
  auto by_start = [](const Interval& a, const Interval& b) { return a.t0 < b.t0; };
  for (auto& [k, xr] : ports) {
    std::sort(xr.first.begin(), xr.first.end(), by_start);
    std::sort(xr.second.begin(), xr.second.end(), by_start);
    NodeSeries& ns = out[std::get<0>(k)];
    place_port(xr.first, true, ns);
    place_port(xr.second, false, ns);
  }
  return out;
}

}  // namespace netprism::analysis::counters
