// Slow-link diagnosis, its measurement: each direction's transfer rate per iteration against its comparable
// links, and the threshold its noise sets (link_rates.cpp); diagnosis_link.cpp decides the findings from
// them, per direction and per node. Internal to the analysis library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "stages.hpp"

namespace netprism::analysis::diagnosis_steps {

// An iteration is degraded for a direction when its rate is below 0.7 of its comparable links' median and
// further below it than the job's own rate noise allows: exp(-3 sigma), sigma the robust
// iteration-to-iteration spread of the job's log rate ratios (kMadToSigma x MAD of consecutive differences /
// sqrt 2; a lasting fault moves a direction's ratio once, at its onset, so it barely widens sigma, while a
// host whose transfers are paced by its CPU rather than its links scatters them in every iteration). A slow
// link is degraded in kLinkPersist = 4 consecutive measured iterations, and is reported after the 4th (the
// detection delay). Measured over the alarms campaign's 44 fresh testbed runs and the 18 kept samples
// (tests/e2e/alarms.py; docs/analysis.md, "Diagnosis"), as the weakest ratio of the consecutive iterations a
// finding needs:
// - healthy and benign runs, 3 iterations: z = -3.02 at worst (ratio 0.50, sigma 0.23: the unshaped veths of
//   the OpenMPI DP4 sample, whose rates follow the CPU); 4 iterations: -2.19 at worst.
// - a host link at half its peers' line rate, 4 iterations: z = -3.9 to -4.6 where the only comparable links
//   are one other pair (DP2 x PP2), -6.3 to -12 elsewhere (ratios 0.46-0.56, sigma 0.06-0.16).
// 3 sigma over 4 iterations lies between the two (1.37x beyond the worst healthy case, 1.29x short of the
// weakest 2x link); over 3 iterations no z separates them with margin. The 0.7 floor keeps a steady job's
// small sigma (0.03-0.08 on links running at line rate) from turning a 20 % wobble into a fault. So a 2x slow
// link is found where sigma < ln 2 / 3 = 0.23; on CPU-paced hosts only links slower than exp(-3 sigma).
// That spread over time missed a host starved of CPU for several iterations (OpenMPI DP4 beside CPU burners:
// a direction or node at 0.22-0.51 of its comparable links against thresholds 0.53-0.63; false slow_links in
// 2 of one campaign batch's 44 runs, 3 of 10 fresh runs of that shape). So sigma is the larger of it and the
// comparison noise, the spread of the direction's own comparable links (comparison_noise()): 0.04-0.08 at a
// line rate (thresholds unchanged), 0.41-1.06 where the hosts' CPUs pace them (docs/analysis.md has it).
inline constexpr double kSlowLinkRatio = 0.7;
inline constexpr double kLinkZ = 3.0;
inline constexpr size_t kLinkPersist = 4;
// Transfers of at least 64 KiB carry a rate; smaller ones are dominated by latency, not rate.
inline constexpr uint64_t kRateMinBytes = 64 * 1024;
// Comparable links needed to measure their spread. Of two or three, the MAD rests on one or two deviations
// and one slow link among them is half of them: on the fabric campaign's DP4 rings (3 comparable links per
// direction) a 6 % gap between two healthy links at line rate read as noise 0.17 (threshold 0.60), and with
// a leaf's uplinks at half rate (ratios 0.55-0.62) the fabric finding was lost in 4 of 5 fresh runs. Four or
// more: one slow link among them does not move the MAD (the CPU-paced OpenMPI DP4: 6 per direction, 4 per
// node). Below it the spread over time alone sets sigma, as before.
inline constexpr size_t kNoiseMinPeers = 4;
// Roles with more directions than this compare with the role's median over all of them (excluding one pair
// moves the median of so many by at most one rank) to stay linear in the job's size.
inline constexpr size_t kExactPeers = 16;

// One direction: its role, its transfers and its median rate per iteration (0: none measured), and per
// iteration the median of the comparable directions (0: fewer than two).
struct Direction {
  uint32_t src = 0, dst = 0;
  EdgeRole role = EdgeRole::dp;
  std::vector<const Xfer*> own;
  std::vector<double> rate, ref;
  std::vector<char> bound;            // per iteration: its rate only a lower bound (empty: none is)
  std::vector<double> noise;          // per iteration: comparison_noise() of its reference's rates
  double threshold = kSlowLinkRatio;  // min(kSlowLinkRatio, exp(-kLinkZ sigma))
  double sigma = 0;                   // max(temporal, cross)
  double temporal = 0;                // its role's iteration-to-iteration spread of log ratios
  double cross = 0;                   // the median of `noise` over its measured iterations
  // Its rate in iteration i only a lower bound (transfers made from counters, shorter than two sampling
  // intervals: link_rates.cpp). Allocated only where one is, so a job without such transfers pays nothing.
  bool bound_at(size_t i) const { return !bound.empty() && bound[i]; }
};

// A transfer's rate, bytes per ns.
double transfer_rate(const Xfer& x);

// The iteration a time falls in; -1 outside the timeline.
int iteration_of(const Timeline& t, uint64_t ns, size_t iters);

// The noise of comparing one link's rate with the median of n comparable links' rates: how far the
// comparable links themselves sit from one another (the robust sigma of their log rates), widened by the
// uncertainty of their median (its variance is about pi / (2n) of theirs). A link at half of a reference
// that spreads over a factor of 2-6 is no slower than its comparable links are from one another (values
// measured: the header comment). 0 for fewer than kNoiseMinPeers.
double comparison_noise(const std::vector<double>& rates);

// The median of a direction's (or node's) per-iteration comparison noise over the iterations it is measured
// in (its rate or ratio > 0, from kWarmup on).
double cross_noise(const std::vector<double>& noise, const std::vector<double>& measured, size_t iters);

// Every rated direction with its rates, references and threshold; iters clamped to the timeline.
std::vector<Direction> measured_directions(const Normalized& n, const JobSlice& job, const Structure& s,
                                           const Timeline& t, size_t& iters);

}  // namespace netprism::analysis::diagnosis_steps
