// How strongly two sets of connections are driven by the same clock (job_grouping.cpp: whether the address
// components that meet on a multi-NIC server are rails of one job or two tenants).
#include <algorithm>
#include <cmath>

#include "stages.hpp"

namespace netprism::analysis {
namespace {

// Transfers that follow each other within 1 ms are one burst of activity: the same idle-gap rule the
// probe uses to cut flowlets and the timeline uses for a synchronisation's bursts (timeline_sync.cpp).
constexpr uint64_t kBurstGapNs = 1'000'000;

uint64_t clipped(const Intervals& xs, uint64_t w0, uint64_t w1) {
  uint64_t t = 0;
  for (auto [a, b] : xs) {
    a = std::max(a, w0);
    b = std::min(b, w1);
    if (b > a) t += b - a;
  }
  return t;
}

uint64_t overlap(const Intervals& xs, const Intervals& ys, uint64_t w0, uint64_t w1) {
  uint64_t t = 0;
  size_t i = 0, j = 0;
  while (i < xs.size() && j < ys.size()) {
    uint64_t a = std::max({xs[i].first, ys[j].first, w0}), b = std::min({xs[i].second, ys[j].second, w1});
    if (b > a) t += b - a;
    (xs[i].second < ys[j].second ? i : j)++;
  }
  return t;
}

}  // namespace

Intervals busy_intervals(Intervals xs) {
  std::sort(xs.begin(), xs.end());
  Intervals out;
  for (auto [a, b] : xs) {
    b = std::max(a, b);
    if (!out.empty() && a <= out.back().second + kBurstGapNs)
      out.back().second = std::max(out.back().second, b);
    else
      out.emplace_back(a, b);
  }
  return out;
}

// The phi coefficient of the two "busy" indicators over the time both are active (its last max_window_ns):
// the continuous form of the correlation of two binary series. Traffic of one collective spread over several
// rails is busy and idle together (phi near 1); two independent jobs overlap only as often as their duty
// cycles make them (phi near 0, whatever the duty cycles).
double activity_coupling(const Intervals& xs, const Intervals& ys, uint64_t max_window_ns) {
  if (xs.empty() || ys.empty()) return 0;
  uint64_t w0 = std::max(xs.front().first, ys.front().first);
  uint64_t w1 = std::min(xs.back().second, ys.back().second);
  if (w1 <= w0) return 0;
  w0 = std::max(w0, w1 - std::min(w1, max_window_ns));
  double w = static_cast<double>(w1 - w0);
  double px = static_cast<double>(clipped(xs, w0, w1)) / w, py = static_cast<double>(clipped(ys, w0, w1)) / w;
  double pxy = static_cast<double>(overlap(xs, ys, w0, w1)) / w;
  // Both busy the whole time they were both seen (a first burst, all a young live job has shown): what one
  // collective spread over rails looks like, and nothing tells them apart yet.
  if (px >= 1 && py >= 1) return 1;
  double den = px * (1 - px) * py * (1 - py);
  if (den <= 0) return 0;  // one of them busy (or idle) all the time: no evidence either way
  return (pxy - px * py) / std::sqrt(den);
}

}  // namespace netprism::analysis
