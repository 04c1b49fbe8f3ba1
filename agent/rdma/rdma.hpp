// Everything RDMA the agent ships: devices and GIDs for HELLO (libibverbs), port counter samples and the
// bursts made from their deltas (sysfs), and the QP table (RDMA netlink). Without RDMA devices it logs one
// line and stays inactive.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "batcher.hpp"
#include "clock.hpp"
#include "netprism/records.hpp"
#include "sysfs.hpp"

namespace netprism::agent {

struct RdmaSourceOptions {
  std::string sysfs_root;
  uint64_t sample_ns = 0;        // counter sampling period
  uint64_t ship_samples_ns = 0;  // how often raw cumulative samples are shipped
  uint64_t qp_refresh_ns = 0;
  uint64_t gap_ns = 0;  // the probe's burst rule
  uint64_t max_burst_ns = 0;
  // Counters-only mode: one burst per active sampling interval (the port's byte series), whatever the gap.
  bool series = false;
};

class RdmaSource {
 public:
  RdmaSource(const RdmaSourceOptions& o, const MonoToRealtime& clock);

  bool sampling() const { return tracker_ != nullptr; }
  const std::vector<InterfaceInfo>& interfaces() const { return ifaces_; }
  // Runs what is due at `now` (CLOCK_MONOTONIC): a counter reading, a QP table refresh.
  void tick(uint64_t now, Batcher& out);
  // At exit: one last reading, then every open burst.
  void finish(uint64_t now, Batcher& out);
  // Overload control: coarser bursts (the gap and maximum duration scaled).
  void set_gap_multiplier(uint32_t m);
  void add_counters(Counters& c) const;

 private:
  void sample(uint64_t now, Batcher& out);
  void refresh_qps(uint64_t now, Batcher& out);
  uint64_t effective_gap() const;

  RdmaSourceOptions o_;
  const MonoToRealtime& clock_;
  std::vector<InterfaceInfo> ifaces_;
  std::vector<RdmaPortPath> ports_;
  std::unique_ptr<RdmaBurstTracker> tracker_;
  bool qp_available_ = true;
  uint64_t qp_rows_ = 0, read_errors_ = 0;
  std::set<std::string> netdev_logged_;  // devices whose bytes come from their interface, said once
  uint64_t last_qp_read_ns_ = 0;         // Unix ns
  uint64_t next_sample_ = 0, next_ship_ = 0, next_qp_ = 0;
  // Flat counters: the QP table is read once when every port has been still for kFlatNs after moving
  // (tick). 0.5 s: a third of the aggregator's shortest hang delay (1.5 s), so the read (shipped within the
  // batch flush, 100 ms) is there before a pass could call the job hung; quiet periods shorter than that
  // (compute phases of fast steps) cost nothing, longer ones one netlink dump each.
  static constexpr uint64_t kFlatNs = 500'000'000;
  std::map<std::string, uint64_t> activity_;  // per port "device/port": the sum of its counters
  uint64_t moved_ns_ = 0;                     // CLOCK_MONOTONIC of the last sample that saw one move
  uint64_t flat_read_for_ = 0;                // moved_ns_ the flat read was made for
};

}  // namespace netprism::agent
