// The analysis' input boundary: what agents record (flowlets, include/netprism/records.hpp) and what a CSV
// import gives (FlowEvents) become analysis events here, and only here. Three consumers share it:
//  - offline `netprism analyze` of a data dir or recording: flowlets -> FlowEvents (text addresses, the
//    form analyze() and the CSV import share);
//  - the daemon's live analysis and its preload from the store: flowlets -> StreamingAnalysis::Events with
//    binary addresses interned through a cache (no text per event: formatting an address costs more than
//    the rest of an event's handling);
//  - replays of FlowEvents into the streaming engine (tests, golden outputs, benches).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis.hpp"
#include "incremental.hpp"
#include "netprism/addr.hpp"
#include "netprism/records.hpp"

namespace netprism::analysis {

// A flowlet's event fields (ports, protocol, direction, times, counts): the one place they are read.
EventFields event_fields(const Flowlet& f);
// A flowlet seen by `observer` as analyze() input.
FlowEvent flow_event(const std::string& observer, const Flowlet& f);
// A FlowEvent as a streaming event, its strings interned in `engine`.
StreamingAnalysis::Event stream_event(StreamingAnalysis& engine, const FlowEvent& e);
void add_event(StreamingAnalysis& engine, const FlowEvent& e);

// Flowlets into a StreamingAnalysis. Addresses repeat (a cluster has few), so their ids are cached by
// binary address; the cache is dropped when the engine renumbers its ids (compaction) or grows large (an
// address scan), which bounds it.
class FlowletFeed {
 public:
  explicit FlowletFeed(StreamingAnalysis& engine) : engine_(engine) {}
  // Adds the flowlets one node observed as one run (StreamingAnalysis::add(span)), leaving out those
  // `skip(flowlet)` is true for (netprism's own traffic, flowlets outside the window). Returns how many
  // were added.
  template <class Skip>
  std::size_t add(const std::string& observer, std::span<const Flowlet> flowlets, Skip&& skip) {
    start(observer);
    for (const auto& f : flowlets)
      if (!skip(f)) push(f);
    return finish();
  }

 private:
  void start(const std::string& observer);
  void push(const Flowlet& f);
  std::size_t finish();  // adds the run; its size
  uint32_t id_of(const uint8_t a[16]);

  struct AddrHash {
    std::size_t operator()(const Addr16& a) const {
      uint64_t x, y;  // the two halves, mixed; addresses differ mostly in the low half
      std::memcpy(&x, a.data(), 8);
      std::memcpy(&y, a.data() + 8, 8);
      return std::hash<uint64_t>{}(x * 0x9e3779b97f4a7c15ull ^ y);
    }
  };
  StreamingAnalysis& engine_;
  std::unordered_map<Addr16, uint32_t, AddrHash> addr_id_;  // address -> interned id
  uint64_t generation_ = 0;                                 // the engine's id generation addr_id_ is of
  uint32_t observer_ = 0;
  std::vector<StreamingAnalysis::Event> run_;  // one call's events (reused)
};

}  // namespace netprism::analysis
