#include <algorithm>

#include "feed.hpp"

namespace netprism::analysis {

namespace {

// A RoCE burst made only of acknowledgements (every packet's BTH opcode an RC ACK) carries no data: the
// responder's NIC sends them, not its process, as a TCP pure ACK is the kernel's. Its UDP payload (BTH,
// AETH, ICRC: 20 bytes a packet) would otherwise read as a message. Measured on soft-RoCE (rdmabed, OpenMPI
// + UCX, DP2 with a 300 ms straggler): the late rank's NIC acknowledged the early rank's half of the
// all-reduce within 3 ms, 8 ACKs (384 B), so the late rank seemed to join at once (lateness +-5 ms for 290
// ms) and the straggler was not named. The burst still counts in its connection (activity, teardown), with
// no data, as a pure TCP ACK does. A burst mixing data and ACKs keeps its payload (ACKs are 20 of ~1,000+
// bytes a data packet).
bool ack_only(const Flowlet& f) {
  return f.key.proto == NP_PROTO_ROCE && f.packets > 0 && f.roce_ops[NP_ROCE_ACK] >= f.packets;
}

}  // namespace

EventFields event_fields(const Flowlet& f) {
  EventFields e;
  e.src_port = f.key.sport;
  e.dst_port = f.key.dport;
  e.qpn = f.key.qpn;
  e.proto = f.key.proto;
  e.dir = static_cast<int8_t>(f.key.dir);
  e.tcp_flags = f.tcp_flags;
  if (f.end_reason == NP_END_SAMPLE)
    e.sampled_1_in = static_cast<uint32_t>(std::min<uint64_t>(f.packets, UINT32_MAX));
  e.first_ns = f.first_ns;
  e.last_ns = f.last_ns;
  e.bytes = f.bytes;
  e.payload_bytes = ack_only(f) ? 0 : f.payload_bytes;
  e.packets = f.packets;
  return e;
}

FlowEvent flow_event(const std::string& observer, const Flowlet& f) {
  FlowEvent e;
  static_cast<EventFields&>(e) = event_fields(f);
  e.observer = observer;
  e.src = format_addr(f.key.saddr);
  e.dst = format_addr(f.key.daddr);
  return e;
}

StreamingAnalysis::Event stream_event(StreamingAnalysis& engine, const FlowEvent& e) {
  StreamingAnalysis::Event x;
  static_cast<EventFields&>(x) = e;
  x.observer = engine.intern(e.observer);
  x.src = engine.intern(e.src);
  x.dst = engine.intern(e.dst);
  return x;
}

void add_event(StreamingAnalysis& engine, const FlowEvent& e) {
  engine.add(stream_event(engine, e));
}

void FlowletFeed::start(const std::string& observer) {
  // 65,536 addresses: far more than a cluster's (a 1,000-node job has a few thousand); past it the
  // traffic is a scan, whose addresses the cache would only hoard.
  if (generation_ != engine_.generation() || addr_id_.size() > 65536) {
    addr_id_.clear();
    generation_ = engine_.generation();
  }
  observer_ = engine_.intern(observer);
  run_.clear();
}

uint32_t FlowletFeed::id_of(const uint8_t a[16]) {
  Addr16 key;
  std::memcpy(key.data(), a, 16);
  auto it = addr_id_.find(key);
  if (it == addr_id_.end()) it = addr_id_.emplace(key, engine_.intern(format_addr(a))).first;
  return it->second;
}

void FlowletFeed::push(const Flowlet& f) {
  StreamingAnalysis::Event& e = run_.emplace_back();
  static_cast<EventFields&>(e) = event_fields(f);
  e.observer = observer_;
  e.src = id_of(f.key.saddr);
  e.dst = id_of(f.key.daddr);
}

std::size_t FlowletFeed::finish() {
  engine_.add(run_);
  return run_.size();
}

}  // namespace netprism::analysis
