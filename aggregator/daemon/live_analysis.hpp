// The analysis running inside the daemon: a bounded window of recent flow events, analysed periodically
// with analysis::analyze (the same pipeline `netprism analyze` runs offline). Queries read the latest
// snapshot, so results are available while jobs run. Jobs are persisted to the store's derived tables
// (jobs/iterations/findings) and reloaded at start, so a job that left the window stays queryable.
#pragma once

#include <condition_variable>
#include <cstring>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis.hpp"
#include "netprism/addr.hpp"
#include "flows.hpp"
#include "settings.hpp"

namespace netprism::daemon {

struct Snapshot {
  std::vector<analysis::Job> jobs;  // current + retained, sorted by id
  uint64_t computed_ns = 0;         // when this snapshot was made (0: no analysis has run yet)
  uint64_t took_ns = 0;
  uint64_t events = 0;  // events in the window it looked at
  const analysis::Job* find(const std::string& id) const;
};

// Rebuilds a Job from its `full` JSON document (as stored in the jobs table).
analysis::Job job_from_json(const nlohmann::json& doc);

class LiveAnalysis {
 public:
  using AddrNodes = std::function<std::map<std::string, std::string>()>;
  LiveAnalysis(const Settings& s, store::OwnTraffic own, AddrNodes addr_nodes);

  // Fills the window from the store and reloads persisted jobs (call once before run()).
  void preload();
  // Called by ingest after a batch is committed.
  void feed(const std::string& node, std::vector<Flowlet>&& flowlets);
  void run(std::stop_token stop);
  std::shared_ptr<const Snapshot> latest() const;
  uint64_t dropped() const;

 private:
  void pass(store::Store* writer);  // null: results are not persisted
  const Settings& s_;
  store::OwnTraffic own_;
  AddrNodes addr_nodes_;

  mutable std::mutex mu_;
  // Fed, not yet in the window: whole batches moved in (O(1) per batch on the ingest thread).
  std::vector<std::pair<std::string, std::vector<Flowlet>>> pending_;
  std::size_t pending_events_ = 0;
  uint64_t dropped_ = 0;
  std::shared_ptr<const Snapshot> latest_;

  // Owned by the analysis thread.
  analysis::Input window_;
  std::map<std::string, analysis::Job> retained_;     // jobs from earlier passes / the store
  std::map<std::string, std::string> persisted_doc_;  // id -> last JSON written, to write only changes
  struct AddrHash {
    std::size_t operator()(const Addr16& a) const {
      uint64_t x, y;  // the two halves, mixed; addresses differ mostly in the low half
      std::memcpy(&x, a.data(), 8);
      std::memcpy(&y, a.data() + 8, 8);
      return std::hash<uint64_t>{}(x * 0x9e3779b97f4a7c15ull ^ y);
    }
  };
  std::unordered_map<Addr16, std::string, AddrHash> addr_text_;  // address -> text (formatting is costly)
};

}  // namespace netprism::daemon
