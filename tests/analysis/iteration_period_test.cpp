// The FSDP / ZeRO-3 reading (iteration_period.cpp) on burst sequences shaped like its traffic: per iteration
// four forward all-gathers (a unit's forward compute after each), the first backward all-gather, three bursts
// of a reduce-scatter beside the next all-gather (twice the backward compute after each), the last
// reduce-scatter, then the optimizer step. No quiet is the longest of every iteration.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "iteration_period.hpp"

using namespace netprism::analysis::iteration_period;

namespace {

struct Bursts {
  std::vector<double> cum, quiet;
  std::vector<size_t> truth;  // burst index of each iteration's last reduce-scatter
};

// `iters` iterations of 3 MB collectives; quiets in ms (forward unit 37, backward unit 75, optimizer 20) and
// small in-collective fragment gaps (3 ms) every other burst, with a deterministic jitter of a few percent.
Bursts fsdp(int iters) {
  Bursts b;
  double cum = 0;
  uint32_t seed = 7;
  auto jitter = [&]() {
    seed = seed * 1103515245u + 12345u;
    return 1.0 + 0.08 * (static_cast<double>((seed >> 16) % 1000) / 1000.0 - 0.5);
  };
  auto burst = [&](double mb, double quiet_ms) {
    // A collective in two fragments 3 ms apart (a descheduled rank), then its quiet.
    cum += mb * 0.5e6;
    b.cum.push_back(cum);
    b.quiet.push_back(3e6 * jitter());
    cum += mb * 0.5e6;
    b.cum.push_back(cum);
    b.quiet.push_back(quiet_ms * 1e6 * jitter());
  };
  for (int i = 0; i < iters; ++i) {
    for (int u = 0; u < 4; ++u) burst(3, 37);
    burst(3, 80);
    for (int u = 0; u < 3; ++u) burst(6, 75);
    burst(3, 20);
    b.truth.push_back(b.cum.size() - 1);
  }
  b.quiet.back() = 0;  // the last burst's quiet is not in view
  return b;
}

}  // namespace

TEST(IterationPeriod, FsdpEndsAtEachIterationsLastReduceScatter) {
  Bursts b = fsdp(12);
  auto q = significant_quiets(b.cum, b.quiet);
  // The fragments' 3 ms gaps are inside collectives; the compute quiets between them are kept.
  EXPECT_EQ(q.size(), 12u * 9u - 1u);
  Reading r = periodic_reading(q, b.cum, 0);
  EXPECT_NEAR(r.period, 36e6, 0.1e6);
  EXPECT_EQ(r.ends, b.truth);
  EXPECT_TRUE(r.closed);
  // The per-unit lag does not recur like the iteration's (forward and backward quiets differ 2x).
  EXPECT_LT(recurring(q, 3e6), r.need);
  EXPECT_GE(recurring(q, 36e6), r.need);
}

// Five iterations in view: the period is searched up to a third of the volume in view, and a replacement of
// the longest-quiet reading needs 4 ends (iteration_volume.cpp); three FSDP iterations are not read.
TEST(IterationPeriod, FiveIterationsAreRead) {
  Bursts b = fsdp(5);
  Reading r = periodic_reading(significant_quiets(b.cum, b.quiet), b.cum, 0);
  EXPECT_EQ(r.ends, b.truth);
}

TEST(IterationPeriod, NoPeriodInAperiodicQuiets) {
  std::vector<double> cum, quiet;
  double c = 0;
  uint32_t seed = 11;
  auto uniform = [&]() {
    seed = seed * 1103515245u + 12345u;
    return static_cast<double>((seed >> 16) % 10000) / 10000.0;
  };
  for (int i = 0; i < 120; ++i) {  // random volumes, quiets log-uniform over 10 ms - 1 s
    c += 1e6 * (0.5 + 5 * uniform());
    cum.push_back(c);
    quiet.push_back(1e7 * std::pow(100.0, uniform()));
  }
  quiet.back() = 0;
  Reading r = periodic_reading(significant_quiets(cum, quiet), cum, 0);
  EXPECT_TRUE(r.ends.empty());
}
