// The C++ side of the kernel probe: loads bpf/probe.bpf.c through its skeleton, attaches it, reads its ring
// buffer and counters, and flushes idle flows. Owned with bpf/ (the probe issue); the agent drives it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "features.hpp"
#include "netprism/addr.hpp"
#include "netprism/flowlet.h"
#include "netprism/probe_abi.h"

namespace netprism::agent {

enum class AttachMode { kTc, kXdp };

struct ProbeOptions {
  uint64_t gap_ns = 0;        // 0: the probe's justified default
  uint64_t max_burst_ns = 0;  // 0: the probe's justified default
  struct Exclude {
    Addr16 addr{};
    uint16_t port = 0;  // 0: every port
  };
  std::vector<Exclude> exclude;  // never observed (the agent's own aggregator connection)
  uint32_t max_flows = 0;        // flow-table entries (preallocated, 192 B each); 0: 65536
  uint32_t front_slots = 0;  // direct-mapped front of the flow table (128 B each, a power of two); 0: 2048
  // Program variant (features.hpp): auto asks the kernel; modern or compat forces one (modern fails to open,
  // with the reason, on a kernel without bpf_loop or __sk_buff.tstamp_type).
  ProbeVariant variant = ProbeVariant::kAuto;
};

using FlowletSink = std::function<void(const np_flowlet&)>;  // times are kernel CLOCK_MONOTONIC ns

// Time base of every probe timestamp and of flush_idle's `now`: CLOCK_MONOTONIC, what bpf_ktime_get_ns reads.
uint64_t monotonic_now_ns();

// The occupied slots of an np_front map fd as (index, slot): a racy snapshot (idle flush, tests). A flow is
// in exactly one of np_front and np_flows.
std::vector<std::pair<uint32_t, np_front_slot>> read_front_slots(int front_fd);

// Use one Probe from one thread (poll and flush_idle both drain the ring buffer); counters() and
// set_thresholds() may be called from any thread.
class Probe {
 public:
  // Loads the probe into the kernel. nullptr and a one-line reason on failure.
  static std::unique_ptr<Probe> open(const ProbeOptions& opts, std::string& err);
  // The variant that was loaded (kModern or kCompat), and the kernel features it was chosen from.
  ProbeVariant variant() const;
  const KernelFeatures& features() const;
  ~Probe();  // detaches everything this Probe attached
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  // Attaches to an interface (tc clsact ingress+egress, or XDP ingress). Never replaces a program or filter
  // it did not install; replaces filters a previous (crashed) agent run left behind.
  bool attach(const std::string& ifname, AttachMode mode, std::string& err);
  void detach_all();

  int ring_fd() const;                        // for epoll: readable when ring-buffer records are ready
  std::size_t poll(const FlowletSink& sink);  // drains ready ring-buffer records, non-blocking
  // Emits and removes bursts idle longer than the gap (all of them when `all`, e.g. at shutdown): every flow
  // whose last packet is older than now_mono_ns - gap_ns() has its burst closed (end_reason IDLE_FLUSH, or
  // SHUTDOWN when `all`) and its entry deleted, decided in the kernel under the entry's lock so a packet that
  // arrives meanwhile is never lost. The closed bursts travel through the ring buffer, and this call drains
  // it into `sink` (gap/max-duration bursts that were waiting included). Returns the bursts it closed.
  // Call it every ~gap_ns() (or at least a few times per second).
  std::size_t flush_idle(uint64_t now_mono_ns, bool all, const FlowletSink& sink);
  std::array<uint64_t, NP_CNT_MAX> counters() const;  // summed over CPUs
  bool set_thresholds(uint64_t gap_ns, uint64_t max_burst_ns, std::string& err);
  uint64_t gap_ns() const;
  uint64_t max_burst_ns() const;
  // Replaces the exclusion list at run time.
  bool set_exclude(const std::vector<ProbeOptions::Exclude>& exclude, std::string& err);
  // Records the ring buffer delivered with a size other than sizeof(np_flowlet) (never expected).
  uint64_t malformed_records() const;

  // For tests and benchmarks: file descriptors of the probe's programs and maps by their BPF names
  // (np_tc_ingress, np_tc_egress, np_xdp, np_flush; np_flows, np_events, ...). -1 if unknown.
  int program_fd(const std::string& name) const;
  int map_fd(const std::string& name) const;

 private:
  struct Key {
    explicit Key() = default;
  };

 public:
  explicit Probe(Key);  // passkey: only open() can construct, and make_unique can reach it

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace netprism::agent
