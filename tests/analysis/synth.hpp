// Synthetic training traffic for the analysis unit tests: a small discrete-event model of a DP x PP job
// (GPipe or 1F1B micro-batch schedule, ring all-reduce among the DP replicas of each stage at the end of
// every iteration), emitted as flowlets the way the agents or the testbed's CSV converter would see them.
// The signal shapes follow /work/shared/research.md and the testbed's train.py; the real recordings of the
// testbed are the judge, these only make each stage testable offline and fast.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis.hpp"

namespace synth {

struct Spec {
  int dp = 2, pp = 2, micro_batches = 4;
  bool gpipe = false;
  int iters = 12;
  double fwd_ms = 30;              // backward takes twice as long
  uint64_t act_bytes = 64 * 1024;  // one activation (= one gradient) message
  uint64_t grad_bytes = 1 << 20;   // gradients all-reduced per stage node per iteration
  double link_mbps = 2000;         // transfer rate (megabytes/s are 1e6 B/s: bytes / (rate * 1e6) s)
  double jitter_ms = 0.3;          // uniform compute jitter per operation
  uint64_t start_ns = 1'700'000'000'000'000'000ull;
  int node_base = 0;           // first node index (several jobs in one input)
  uint16_t port_base = 40000;  // ephemeral ports of this job's connections
  std::string subnet = "10.0.0.";
  // Faults
  int straggler_node = -1;  // node index (within the job) computing `straggler_factor` slower from iteration
  double straggler_factor = 1.0;
  int straggler_from = 0;
  int straggler_to = 1 << 30;  // last slow iteration (a transient stall: from = to)
  int slow_node =
      -1;  // node whose outgoing transfers run at link_mbps / slow_factor from iteration slow_from
  double slow_factor = 1.0;
  int slow_from = 0;
  int slow_to = 1 << 30;   // last slow iteration (a transient glitch: from = to)
  bool slow_both = false;  // the slow node's incoming transfers too (its host link, both ways)
  // Each direction's rate times exp(N(0, link_spread)), and each iteration's times exp(N(0, link_spread /
  // 5)): links paced by their hosts' CPUs rather than by a line rate, some lastingly faster than others as on
  // the OpenMPI runs beside CPU burners (0: every link at link_mbps).
  double link_spread = 0;
  int pause_at = -1;  // every node pauses pause_ms at the start of this iteration
  double pause_ms = 0;
  int hang_at = -1;  // traffic stops at this iteration (node hang_node stops first); no teardown
  int hang_node = 0;
  bool teardown = true;         // FIN flags on every connection at the end
  bool both_observers = false;  // every transfer seen at the sender (egress) and the receiver (ingress)
  bool control = true;          // store connections and idle all-pairs connections with small traffic
  uint32_t seed = 1;
};

struct Truth {
  std::vector<uint64_t> boundaries;  // end of each iteration's last DP sync (stage 0), or pipeline start
  std::vector<std::string> nodes;
};

std::string node_name(const Spec& s, int i);
std::string node_addr(const Spec& s, int i);
// Appends the job's events to `in` (and its addresses to in.addr_node); returns the truth.
Truth generate(const Spec& s, netprism::analysis::Input& in);

}  // namespace synth
