// Stage 1: from observed events to node-level transfers.
//
// Agents see every transfer twice (the sender's egress, the receiver's ingress). Keeping both would double
// volumes and blur times, and mixing them per event would reorder bursts, so the choice is made per flow
// direction: the sender's own view when its agent saw it (its timestamps are when the data left, the
// moment the training process acted), otherwise one fixed observer (the smallest name), never both.
#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "netprism/flowlet.h"
#include "stages.hpp"

namespace netprism::analysis {
namespace {

// IP-level bytes per packet at or below which a CSV row without payload counts carries no payload: the
// largest header of a pure ACK is 20 (IPv4) or 40 (IPv6) bytes of IP plus 60 of TCP with every option
// (timestamps, SACK blocks). Anything above carries payload, even a few bytes: small messages matter too
// (a collective's "ready to receive" notification tells when a member joined).
constexpr uint64_t kAckOnlyBytesPerPacketV4 = 80;
constexpr uint64_t kAckOnlyBytesPerPacketV6 = 100;

constexpr uint16_t kFin = 0x01, kRst = 0x04;

std::string flow_key(const FlowEvent& e) {
  return e.src + '|' + std::to_string(e.src_port) + '|' + e.dst + '|' + std::to_string(e.dst_port) + '|' +
         std::to_string(e.proto) + '|' + std::to_string(e.qpn);
}

// Both directions of a connection share one key: endpoints in a fixed order, QPN left out (RoCE names the
// destination QP, which differs per direction).
std::string conn_key(const FlowEvent& e, bool& forward) {
  auto a = std::tie(e.src, e.src_port), b = std::tie(e.dst, e.dst_port);
  forward = !(b < a);
  const auto& [s1, p1] = forward ? a : b;
  const auto& [s2, p2] = forward ? b : a;
  return s1 + '|' + std::to_string(p1) + '|' + s2 + '|' + std::to_string(p2) + '|' + std::to_string(e.proto);
}

uint64_t data_bytes(const FlowEvent& e) {
  if (e.payload_bytes > 0) return e.payload_bytes;
  if (e.dir >= 0) return 0;  // an agent flowlet with no payload: pure ACKs / handshakes
  uint64_t hdr = e.src.find(':') == std::string::npos ? kAckOnlyBytesPerPacketV4 : kAckOnlyBytesPerPacketV6;
  if (e.packets > 0 && e.bytes <= e.packets * hdr) return 0;
  return e.bytes;
}

}  // namespace

Normalized normalize(const Input& in) {
  Normalized out;
  std::unordered_map<std::string, uint32_t> node_idx;
  auto node_of = [&](const std::string& addr) {
    auto it = in.addr_node.find(addr);
    const std::string& name = it == in.addr_node.end() ? addr : it->second;
    auto [pos, inserted] = node_idx.try_emplace(name, static_cast<uint32_t>(out.nodes.size()));
    if (inserted) out.nodes.push_back(name);
    return pos->second;
  };

  // Pass 1: the observer kept for each flow direction.
  std::unordered_map<std::string, std::string> chosen;
  chosen.reserve(in.events.size() / 4 + 16);
  for (const auto& e : in.events) {
    auto it = in.addr_node.find(e.src);
    const std::string& sender = it == in.addr_node.end() ? e.src : it->second;
    auto [pos, inserted] = chosen.try_emplace(flow_key(e), e.observer);
    if (inserted) continue;
    std::string& cur = pos->second;
    if (cur == sender) continue;
    if (e.observer == sender || e.observer < cur) cur = e.observer;
  }

  // Pass 2: connections and transfers.
  std::unordered_map<std::string, uint32_t> conn_idx;
  uint64_t last_seen = 0;
  for (const auto& e : in.events) {
    bool fwd = true;
    {
      std::string ck = conn_key(e, fwd);
      auto [p, n] = conn_idx.try_emplace(std::move(ck), static_cast<uint32_t>(out.conns.size()));
      if (n) {
        Conn c;
        uint32_t s = node_of(e.src), d = node_of(e.dst);
        c.a = fwd ? s : d;
        c.b = fwd ? d : s;
        c.label =
            fwd ? e.src + ":" + std::to_string(e.src_port) + "<->" + e.dst + ":" + std::to_string(e.dst_port)
                : e.dst + ":" + std::to_string(e.dst_port) + "<->" + e.src + ":" + std::to_string(e.src_port);
        out.conns.push_back(std::move(c));
      }
      Conn& c = out.conns[p->second];
      c.first_ns = std::min(c.first_ns, e.first_ns);
      c.last_ns = std::max(c.last_ns, e.last_ns);
      if (e.tcp_flags & (kFin | kRst)) c.closed = true;
      last_seen = std::max(last_seen, e.last_ns);
      if (chosen[flow_key(e)] != e.observer) continue;
      uint64_t bytes = data_bytes(e);
      if (bytes == 0) continue;
      (fwd ? c.bytes_ab : c.bytes_ba) += bytes;
      c.xfers++;
      out.xfers.push_back(
          {fwd ? c.a : c.b, fwd ? c.b : c.a, p->second, e.first_ns, std::max(e.first_ns, e.last_ns), bytes});
    }
  }
  std::sort(out.xfers.begin(), out.xfers.end(), [](const Xfer& x, const Xfer& y) {
    return std::tie(x.t0, x.t1, x.conn) < std::tie(y.t0, y.t1, y.conn);
  });
  out.now_ns = in.now_ns ? in.now_ns : last_seen;
  out.offline = in.offline;
  return out;
}

}  // namespace netprism::analysis
