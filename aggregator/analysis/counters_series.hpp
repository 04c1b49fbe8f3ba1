// Per-node byte series of the RDMA counters source (counters_source.cpp): each port's bursts (one per active
// sampling interval) placed on a 1 ms grid, with what each interval carried as its packets' mean size says.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis.hpp"

namespace netprism::analysis::counters {

constexpr uint64_t kBinNs = 1'000'000;  // 1 ms grid: a tenth of the sampling interval
// RoCE's usual path MTU (ConnectX default with a 9000-byte Ethernet MTU; 1024 with 1500): bytes per PSN.
constexpr double kRoceMtu = 4096;

using Series = std::map<uint64_t, double>;  // bin -> bytes

struct NodeSeries {
  // Bytes that may carry data: intervals whose packets' mean size says data, and intervals it cannot say
  // anything about (no packet counter, or a packet count read apart from the bytes: see node_series).
  Series xmit, rcv;
  Series xmit_data;  // the part of xmit whose packets' mean size says data
  Series xmit_acks;  // intervals of header-only packets (acknowledgements): sent, carrying no data
};

// Each port's bursts on the grid, summed per node.
std::map<std::string, NodeSeries> node_series(const std::vector<NodePortBurst>& bursts);

// Each node's sampling interval in ms (see counters_source.cpp, EventFields::counters_interval_ms).
std::map<std::string, uint16_t> sampling_intervals_ms(const std::vector<NodePortBurst>& bursts);

// Places `bytes` uniformly over [t0, t1) on the grid.
void spread(Series& s, uint64_t t0, uint64_t t1, double bytes);
double value_at(const Series& s, uint64_t bin);
// Bytes of a series within `w` bins of `bin`, either side.
double window_sum(const Series& s, uint64_t bin, uint64_t w);

}  // namespace netprism::analysis::counters
