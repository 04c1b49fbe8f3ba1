// Time for the agent: the kernel stamps flowlets with CLOCK_MONOTONIC (bpf_ktime_get_ns); users compare them
// with time.time(), so everything shipped is CLOCK_REALTIME ns. The offset between the two clocks moves when
// NTP/PTP steps or slews the realtime clock, so it is re-measured periodically, and the node's clock
// discipline (chrony/PTP/NTP state) is reported to the aggregator.
#pragma once

#include <cstdint>
#include <string>

#include "netprism/records.hpp"

namespace netprism::agent {

uint64_t mono_now_ns();
uint64_t real_now_ns();

// Monotonic -> Unix-epoch conversion.
class MonoToRealtime {
 public:
  MonoToRealtime() { calibrate(); }
  // Re-measures the offset; returns how far it moved (ns, signed) since the previous calibration.
  int64_t calibrate();
  uint64_t to_realtime(uint64_t mono_ns) const { return mono_ns + static_cast<uint64_t>(offset_ns_); }
  int64_t offset_ns() const { return offset_ns_; }
  // Width of the tightest realtime-monotonic-realtime read window seen in the last calibration: the
  // conversion's own uncertainty.
  uint64_t uncertainty_ns() const { return uncertainty_ns_; }
  // For tests: a fixed offset.
  void set_offset_for_test(int64_t off) { offset_ns_ = off; }

 private:
  int64_t offset_ns_ = 0;
  uint64_t uncertainty_ns_ = 0;
};

// What disciplines this node's clock, from the kernel (adjtimex: synchronised flag, estimated error) and the
// running time daemons (/proc/*/comm: chronyd, ptp4l/phc2sys, ntpd, systemd-timesyncd). `proc_root` is a
// parameter for tests.
ClockInfo read_clock_discipline(const std::string& proc_root = "/proc");

// Pure part of the above, for tests: picks the source from the daemons found and the kernel state.
ClockInfo classify_clock(bool chronyd, bool ptp, bool ntpd, bool timesyncd, bool kernel_synced,
                         int64_t kernel_esterror_us);

}  // namespace netprism::agent
