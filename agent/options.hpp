// The agent's settings: command-line flags, the TOML file (keys mirror the flags; sections for the finer
// knobs), and defaults, with "flags override the file".
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "batcher.hpp"
#include "budget.hpp"
#include "delivery.hpp"
#include "netprism/config.hpp"

namespace netprism::agent {

struct AgentOptions {
  std::string aggregator = "tcp://127.0.0.1:7470";
  std::string node;  // empty: host name
  std::vector<std::string> ifaces;
  std::string mode = "tc";
  // Inside the packaged unit's StateDirectory (netprism/agent): the only place ProtectSystem=strict lets it
  // write.
  std::string spool_dir = "/var/lib/netprism/agent/spool";
  std::string rdma_sysfs = "/sys/class/infiniband";
  // CURVE (issue 18): this agent's secret key and the aggregator's public key; `insecure` for plain TCP.
  std::string key_file, server_pub_file;
  bool insecure = false;

  BatcherOptions batching;
  DeliveryOptions delivery;               // endpoint filled from `aggregator`
  uint64_t spool_max_bytes = 1ull << 30;  // 1 GiB: ~13M flowlets, minutes of a busy node's outage
  uint64_t linger_ns = 5'000'000'000ull;  // at exit: time to get ACKs before the rest goes to the spool

  // The probe's program variant (bpf/README.md "Kernel variants"): auto asks the kernel (modern where
  // bpf_loop and __sk_buff.tstamp_type exist, 5.18+; compat otherwise, 5.13+); modern or compat forces one.
  std::string probe_variant = "auto";
  uint64_t probe_gap_ns = 0;        // 0: the probe's default
  uint64_t probe_max_burst_ns = 0;  // 0: the probe's default
  // How often quiet flows' last bursts are collected from the probe's table. A burst's times come from its
  // packets, not from this call, so the interval only delays the report (<= 100 ms, matching the batch
  // interval) while keeping the table walk to 10 per second.
  uint64_t idle_flush_ns = 100'000'000ull;

  bool rdma_enabled = true;
  // 10 ms sampling resolves bursts of a few ms-long collectives; reading 4 small sysfs files per port 100
  // times a second is well under 1 % of a core.
  uint64_t rdma_sample_ns = 10'000'000ull;
  uint64_t rdma_ship_samples_ns = 1'000'000'000ull;  // raw cumulative samples shipped once a second
  uint64_t rdma_qp_refresh_ns = 5'000'000'000ull;    // QP tables change when jobs start or stop
  // Counters-only mode (`--rdma-counters-only`, rdma.counters_only): what an agent can see on a NIC whose
  // RoCE traffic bypasses the kernel. The probe's RoCE flowlets are dropped (it keeps watching TCP/UDP, e.g.
  // the jobs' bootstrap connections); each port's counters are shipped as one burst per active sampling
  // interval (the per-port byte series) and the QP table, with its PSNs (per-QP packet counts), is read at
  // every sample. The aggregator's counters source (aggregator/analysis/counters.hpp) makes transfers of
  // them.
  bool rdma_counters_only = false;

  uint64_t clock_recalibrate_ns = 10'000'000'000ull;  // NTP slews at most 500 ppm: <= 5 ms drift in 10 s,
                                                      // and chrony typically slews far less
  BudgetOptions budget;
};

config::Schema agent_schema();

// Fills `o` from file values for every setting whose flag was not given (`flags_given` holds the long flag
// names, e.g. "aggregator", "iface"). Returns "" or an error naming the key.
std::string apply_config(const config::Values& v, const std::set<std::string>& flags_given, AgentOptions& o);

// Checks values that a file or flag can get wrong; "" or a one-line error.
std::string validate(const AgentOptions& o);

// Loads the CURVE keys into o.delivery.curve (nothing when insecure); "" or a one-line error.
std::string load_keys(AgentOptions& o);

}  // namespace netprism::agent
