// The C++ side of the kernel probe: loads bpf/probe.bpf.c through its skeleton, attaches it, reads its ring
// buffer and counters, and flushes idle flows. Owned with bpf/ (the probe issue); the agent drives it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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
};

using FlowletSink = std::function<void(const np_flowlet&)>;  // times are kernel CLOCK_MONOTONIC ns

class Probe {
 public:
  // Loads the probe into the kernel. nullptr and a one-line reason on failure.
  static std::unique_ptr<Probe> open(const ProbeOptions& opts, std::string& err);
  ~Probe();  // detaches everything this Probe attached
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  // Attaches to an interface (tc clsact ingress+egress, or XDP ingress). Never replaces a program or filter
  // it did not install; replaces filters a previous (crashed) agent run left behind.
  bool attach(const std::string& ifname, AttachMode mode, std::string& err);
  void detach_all();

  int ring_fd() const;                        // for epoll
  std::size_t poll(const FlowletSink& sink);  // drains ready ring-buffer records, non-blocking
  // Emits and removes bursts idle longer than the gap (all of them when `all`, e.g. at shutdown).
  std::size_t flush_idle(uint64_t now_mono_ns, bool all, const FlowletSink& sink);
  std::array<uint64_t, NP_CNT_MAX> counters() const;  // summed over CPUs
  bool set_thresholds(uint64_t gap_ns, uint64_t max_burst_ns, std::string& err);
  uint64_t gap_ns() const;

 private:
  Probe();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace netprism::agent
