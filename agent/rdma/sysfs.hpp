// RDMA port counters from sysfs (/sys/class/infiniband/<dev>/ports/<n>/counters and hw_counters), and the
// turning of their deltas into per-port activity bursts with the probe's burst rule (a burst ends after an
// idle gap above the threshold, or when it reaches the maximum duration).
//
// Hardware RoCE bypasses the kernel's packet path, so on an offloading NIC these counters are the per-node
// signal. port_xmit_data/port_rcv_data count 4-byte words: every byte figure here is words x 4.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "netprism/records.hpp"

namespace netprism::agent {

struct RdmaPortPath {
  std::string device;
  uint32_t port = 0;
  std::string dir;       // <root>/<device>/ports/<port>
  std::string net_root;  // the network interfaces' sysfs class beside root (<root>/../net)
};

// Every <root>/<dev>/ports/<n> directory, sorted. Empty (not an error) when root does not exist.
std::vector<RdmaPortPath> list_rdma_ports(const std::string& root);

// Raw counter values as the kernel reports them (data counters still in 4-byte words).
struct RawPortCounters {
  uint64_t xmit_words = 0, rcv_words = 0, xmit_packets = 0, rcv_packets = 0;
  std::map<std::string, uint64_t> hw;
  std::string
      bytes_from_netdev;  // the interface whose byte counters stand for the port's (empty: the port's)
};

// Reads one port's counters; false + reason when a required counter is missing or not a number. A port
// without the counters/ group (soft-RoCE) counts packets in hw_counters and no bytes: its bytes and packets
// are then its network interface's (gid_attrs/ndevs/0 names it; <net_root>/<if>/statistics), which carries
// its RoCE packets and whatever else that interface sends (RawPortCounters::bytes_from_netdev).
// all_hw: every hw_counters file (what a shipped sample carries); false: only what bytes and packets need,
// for the burst series' readings between shipped samples (each file is an open/read/close, and a stale
// cache a driver query: rxe lists about 15, a ConnectX dozens).
bool read_port_counters(const RdmaPortPath& p, RawPortCounters& out, std::string& err, bool all_hw = true);

// The shipped sample: cumulative values, bytes = words x 4.
RdmaCounterSample to_sample(const RdmaPortPath& p, uint64_t ts_ns, const RawPortCounters& c);

enum class DeltaKind { kNormal, kWrap32, kWrap64, kReset, kSaturated };
struct CounterDelta {
  uint64_t value = 0;
  DeltaKind kind = DeltaKind::kNormal;
};

// Delta between two readings of one counter. A device without extended counters reports 32-bit values
// (IB PortCounters): a decrease from a value that fits 32 bits is a 32-bit wrap. A 64-bit counter only
// wraps from near 2^64 (a decrease from above 2^63 is a wrap); any other decrease is a counter reset (driver
// reload, device reset) and the new value is the delta. Two readings both at 2^32-1 are a saturated 32-bit
// counter: the delta is unknown, reported as 0 and flagged.
CounterDelta counter_delta(uint64_t prev, uint64_t cur);

struct RdmaBurstStats {
  uint64_t samples = 0, wraps = 0, resets = 0, saturated = 0, bursts = 0;
};

// Per-port burst builder over successive samples. Activity seen in a sample interval (t_prev, t] starts a
// burst at t_prev (the earliest the traffic can have begun) and extends it to t.
class RdmaBurstTracker {
 public:
  RdmaBurstTracker(uint64_t gap_ns, uint64_t max_burst_ns) : gap_ns_(gap_ns), max_burst_ns_(max_burst_ns) {}
  // ts_ns: Unix-epoch ns of the reading. Closed bursts are appended to `out`.
  void feed(const std::string& device, uint32_t port, uint64_t ts_ns, const RawPortCounters& c,
            std::vector<RdmaPortBurst>& out);
  // Emits every open burst (shutdown) or only those idle past the gap (`now_ns` given).
  void flush(std::vector<RdmaPortBurst>& out, std::optional<uint64_t> now_ns = std::nullopt);
  void set_thresholds(uint64_t gap_ns, uint64_t max_burst_ns) {
    gap_ns_ = gap_ns;
    max_burst_ns_ = max_burst_ns;
  }
  const RdmaBurstStats& stats() const { return stats_; }

 private:
  struct PortState {
    uint64_t prev_ts = 0;
    RawPortCounters prev;
    bool active = false;
    RdmaPortBurst cur;
  };
  uint64_t delta(uint64_t prev, uint64_t cur);
  uint64_t gap_ns_, max_burst_ns_;
  std::map<std::pair<std::string, uint32_t>, PortState> ports_;
  RdmaBurstStats stats_;
};

}  // namespace netprism::agent
