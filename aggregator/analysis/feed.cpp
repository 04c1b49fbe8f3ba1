#include <algorithm>

#include "feed.hpp"

namespace netprism::analysis {

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
  e.payload_bytes = f.payload_bytes;
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
