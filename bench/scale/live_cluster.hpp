// `netprism-sim live`: a large cluster played in real time into an aggregator (issue 20's scale benchmark,
// bench/scale/run_live_scale.sh). Synthetic jobs of 8-512 nodes start and end all the time on a cluster of
// N nodes (one virtual agent per node, every transfer split over the node's NICs and reported by both ends);
// they give the rates and sizes. Real recordings (testbed samples, SimAI) replayed as several copies on
// nodes of their own give the accuracy. Truth goes to a JSON-lines file as jobs start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace netprism::sim {

struct LiveClusterOptions {
  std::string endpoint;
  int nodes = 1250;
  int jobs = 20;  // concurrent synthetic jobs
  int nics = 8;   // per node: each transfer becomes one flowlet per NIC (its own QP), per end
  double minutes = 30;
  uint64_t seed = 1;
  std::string truth;                 // JSON lines: one per synthetic job and per replay copy
  std::vector<std::string> replays;  // CSV:TOPOLOGY:COPIES
};

int run_live_cluster(const LiveClusterOptions& o);

}  // namespace netprism::sim
