// Traffic for the attached benchmarks: a TCP bulk stream and a RoCEv2-shaped UDP stream (UDP to port 4791
// whose payload starts with a BTH) from the host end of a veth pair into its namespace.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "bpf/veth_netns.hpp"

namespace netprism::bench {

struct StreamResult {
  uint64_t bytes = 0;    // payload bytes the receiver got
  uint64_t packets = 0;  // datagrams received (UDP) or 0
  double seconds = 0;
};

struct StreamOptions {
  // Sender on CPU 0, receiver on CPU 1 (when the machine has two): with both threads free to migrate, the
  // scheduler's placement decides a round's throughput more than anything under test (+-8 % between
  // rounds here). The veth hand-off runs the receive stack in the sender's softirq, so each CPU carries
  // one side, as netperf -T would place them.
  bool pin = false;
};

StreamResult tcp_stream(const test::VethNetns& net, double seconds, const StreamOptions& opt = {});
// One TCP connection streaming for the whole measurement, cut into phases: before phase k, set_phase(k)
// runs (e.g. attaches or detaches the probe), then `settle` seconds pass unmeasured, then the receiver's byte
// count over `phase_seconds` is the phase's result. Comparing phases of one connection removes what differs
// between connections (buffer autotuning, placement), which dominates round-to-round noise here.
std::vector<StreamResult> tcp_stream_phased(const test::VethNetns& net, int phases, double phase_seconds,
                                            double settle, const std::function<void(int)>& set_phase,
                                            const StreamOptions& opt = {});

StreamResult roce_stream(const test::VethNetns& net, double seconds);

}  // namespace netprism::bench
