// Overload control. The agent measures its own CPU time and its record rate over one-second windows against
// a configured budget. Over budget, it degrades one stated step at a time instead of silently falling
// behind; under half the budget for a while, it recovers a step. Every step and the current level are
// counters shipped with each batch, and each change is logged.
//
//   level 0: normal
//   level 1: flush interval x4            -- fewer, larger batches: less per-message CPU and fewer commits
//   level 2: + burst gap and max burst x4 -- coarser bursts: fewer records for the same bytes
//   level 3: + burst gap and max burst x16, flush interval x10
// Byte and packet totals stay exact at every level; only time resolution is given up.
#pragma once

#include <cstdint>

namespace netprism::agent {

struct BudgetOptions {
  // A quarter of one core: negligible next to a training job on a many-core GPU node, yet far above what
  // the agent needs at normal flowlet rates (its work per record is a copy and a msgpack encode).
  double cpu_percent = 25.0;
  // 200k records/s is ~16 MB/s of msgpack to the aggregator from one node; a cluster of such nodes would
  // swamp one aggregator, so past it time resolution is traded for volume.
  double max_records_per_sec = 200000.0;
  uint64_t window_ns = 1'000'000'000ull;
  // Two bad windows in a row before degrading (one can be a start-up or GC-like blip); ten good ones
  // (under half the budget) before recovering, so the level does not flap around the threshold.
  int windows_to_degrade = 2;
  int windows_to_recover = 10;
};

struct BudgetLevel {
  int level = 0;
  uint32_t flush_multiplier = 1;
  uint32_t gap_multiplier = 1;
};

class Budget {
 public:
  static constexpr int kMaxLevel = 3;
  explicit Budget(BudgetOptions o) : o_(o) {}

  // Feeds one window's measurements; returns true when the level changed.
  bool observe(uint64_t cpu_ns, uint64_t records, uint64_t wall_ns);
  BudgetLevel level() const { return level_for(level_); }
  static BudgetLevel level_for(int level);
  uint64_t degrade_steps() const { return degrade_steps_; }
  uint64_t recover_steps() const { return recover_steps_; }
  uint64_t over_windows() const { return over_windows_; }
  double last_cpu_percent() const { return last_cpu_; }
  double last_rate() const { return last_rate_; }
  const BudgetOptions& options() const { return o_; }

 private:
  BudgetOptions o_;
  int level_ = 0;
  int over_run_ = 0, under_run_ = 0;
  uint64_t degrade_steps_ = 0, recover_steps_ = 0, over_windows_ = 0;
  double last_cpu_ = 0, last_rate_ = 0;
};

// This process's CPU time (user + system), ns.
uint64_t process_cpu_ns();

}  // namespace netprism::agent
