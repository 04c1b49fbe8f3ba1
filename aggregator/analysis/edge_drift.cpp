// An edge's volume drift: how much more one direction carries than the other per unit of the edge's traffic,
// with what is in flight at the window's ends averaged out. Used by parallelism.cpp to veto a pipeline
// reading: a pipeline edge carries the same volume both ways every iteration (a micro-batch's gradient
// has its activation's shape), so its drift is ~0; an asymmetric exchange drifts by (r - 1) / (r + 1) per
// byte, r the ratio of its directions' volumes.
//
// On the volume clock w (bytes of both directions so far), the balance B(w) = u's bytes - the other's bytes
// of a periodic pipeline is periodic with one iteration's edge volume as its period, so its mean over any
// stretch of whole periods is the same wherever the stretch lies: the mean over the last L of the window
// minus the mean over the first L, divided by W - L (how far apart they are), is ~0 for L a whole number of
// periods, and the drift s for an asymmetric exchange at any L. The minimum of |that| over L in [W/8, W/2]
// needs no period estimate: the range holds a whole number of periods whenever the window holds two
// iterations or more. Volume, not time: pauses, stragglers and host load do not move it. Episodes
// (episodes_of) are the clock's steps, B moving linearly through each by its net, so the order of the
// messages inside one (1F1B's crossing activation and gradient) does not count.
#include <cmath>
#include <limits>
#include <vector>

#include "stages.hpp"

namespace netprism::analysis {
namespace {

// Grid of the volume clock: 128 points; the lags are 16..64 of them. 64 and 256 change every measured value
// by at most 0.001 (tests/data/dp2_read_as_pp/README.md).
constexpr size_t kGrid = 128;
constexpr size_t kMinLag = kGrid / 8, kMaxLag = kGrid / 2;
// Drift above which an edge is not a pipeline: its heavier direction carries 1.13x the lighter or more every
// iteration. Measured (tests/data/dp2_read_as_pp/README.md): the 36 pipeline edges of the kept samples at
// most 0.004 over their whole recordings, 0.023 in any window of 3 iterations (2.6x below; 0.053 in 2),
// OpenMPI's two-rank reduce-scatter as reduce + scatter (1.33x) 0.128-0.145 in every window of 3 or more
// (2.1x above). Retransmitted bytes count: a pipeline edge that retransmits an eighth of its data in a
// short window would be misread as an exchange.
constexpr double kMaxPipelineDrift = 0.06;

// The balance on the grid: B[j] at volume j * W / kGrid, linear inside each episode.
std::vector<double> balance_on_grid(const std::vector<std::pair<double, double>>& eps, double total) {
  std::vector<double> b(kGrid + 1, 0.0);
  const double step = total / kGrid;
  double w = 0, bal = 0;
  size_t j = 1;
  for (const auto& [vol, net] : eps) {
    for (; j <= kGrid && static_cast<double>(j) * step <= w + vol; ++j)
      b[j] = bal + net * (static_cast<double>(j) * step - w) / vol;
    w += vol;
    bal += net;
  }
  for (; j <= kGrid; ++j) b[j] = bal;
  return b;
}

}  // namespace

double drift_share(const std::vector<const Xfer*>& xs, const std::vector<Episode>& episodes, uint32_t u) {
  if (episodes.size() < 2) return 0;
  std::vector<std::pair<double, double>> eps;  // per episode: volume, net (u's bytes minus the other's)
  double total = 0;
  for (size_t k = 0; k < episodes.size(); ++k) {
    if (episodes[k].bytes <= 0) continue;
    const size_t end = k + 1 < episodes.size() ? episodes[k + 1].first : xs.size();
    double net = 0;
    for (size_t i = episodes[k].first; i < end; ++i)
      net += (xs[i]->src == u ? 1.0 : -1.0) * static_cast<double>(xs[i]->bytes);
    eps.emplace_back(episodes[k].bytes, net);
    total += episodes[k].bytes;
  }
  if (eps.size() < 2 || total <= 0) return 0;
  const std::vector<double> b = balance_on_grid(eps, total);
  std::vector<double> pre(kGrid + 1, 0.0);  // trapezoid integral of B over grid cells
  for (size_t i = 0; i < kGrid; ++i) pre[i + 1] = pre[i] + (b[i] + b[i + 1]) / 2;
  const double step = total / kGrid;
  double best = std::numeric_limits<double>::infinity();
  for (size_t m = kMinLag; m <= kMaxLag; ++m) {
    const double last = pre[kGrid] - pre[kGrid - m], first = pre[m];
    const double s = (last - first) / static_cast<double>(m) / (static_cast<double>(kGrid - m) * step);
    best = std::min(best, std::fabs(s));
  }
  return best;
}

bool volume_drifts(const std::vector<const Xfer*>& xs, const std::vector<Episode>& episodes, uint32_t u) {
  return drift_share(xs, episodes, u) > kMaxPipelineDrift;
}

}  // namespace netprism::analysis
