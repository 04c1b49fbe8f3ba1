// netprism-sim's cluster model: what a cluster of training jobs puts on the network, transfer by transfer,
// with the ground truth the analysis should recover. Pure: a spec in, transfers and truth out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace netprism::sim {

struct FaultSpec {
  std::string kind;  // straggler | slow_link | hang
  int node = 0;      // job-local node index (straggler, hang; slow_link: one end)
  int peer = -1;     // slow_link: the other end (-1: every link of `node`)
  double factor = 1.3;
  int from_iteration = 0;
};

struct JobSpec {
  int dp = 2;
  int pp = 2;
  int tp = 8;  // GPUs per node in the job's TP group (stays inside the node: never on the network)
  int ep = 1;  // expert-parallel all-to-all group size among DP peers (1: none)
  int micro_batches = 4;
  bool one_f_one_b = true;
  int iterations = 100;
  double fwd_ms = 20;         // per micro-batch forward compute of one stage
  double activation_mb = 16;  // per micro-batch activation (and gradient) size between stages
  double grad_mb = 256;       // gradient bytes per node all-reduced at the end of every iteration
  double optimizer_ms = 30;   // after the DP sync, before the next iteration starts
  double jitter = 0.01;       // relative sd of compute times
  double start_offset_ms = 0;
  std::vector<FaultSpec> faults;
};

struct ClusterSpec {
  int nodes = 16;  // total nodes; jobs take consecutive ranges, the rest stay idle
  double link_gbps = 100;
  uint64_t seed = 1;
  uint64_t t0_ns = 1'000'000'000;  // simulators start near 0 (contracts: CSV times pass through)
  std::vector<JobSpec> jobs;
};

// One message transfer: what a flowlet of the sender's egress (and receiver's ingress) reports.
struct Transfer {
  int src = 0;  // global node index
  int dst = 0;
  uint32_t qpn = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t bytes = 0;
};

struct Simulation {
  std::vector<Transfer> transfers;  // sorted by start_ns
  nlohmann::json truth;
};

std::string node_name(int global_index);
std::string node_addr(int global_index);  // 10.x.y.z, one per node
uint16_t src_port(int src, int dst);

Simulation simulate(const ClusterSpec& spec);

}  // namespace netprism::sim
