// An edge's causality balance (parallelism.cpp's evidence of a pipeline): for an orientation u, the volume
// "u's sends counted at their start minus the other's counted at their end", walked through the edge's
// transfers. A pipeline edge with u upstream never takes it below zero (a gradient ends after its activation
// started) and, in the other orientation, never above zero (a gradient starts after its activation ended, and
// has its shape). EdgeBalance reports how long it stays below -eps and how often it leaves [-eps, eps] on
// either side.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "stages.hpp"

namespace netprism::analysis {
namespace {

// A residue under a quarter of the episode's volume is not an outstanding message: pipeline episodes are one
// or two messages, so an outstanding one is at least half the episode.
constexpr double kResidueShare = 0.25;

// The running balance's range over every suffix of the events: lo[i] / hi[i] is the lowest / highest
// cumulative sum from event i on (without resets).
struct SuffixRange {
  std::vector<double> lo, hi;
};
SuffixRange suffix_range(const std::vector<std::pair<uint64_t, double>>& ev) {
  SuffixRange r{std::vector<double>(ev.size() + 1), std::vector<double>(ev.size() + 1)};
  double sum = 0;
  for (const auto& e : ev) sum += e.second;
  r.lo[ev.size()] = r.hi[ev.size()] = sum;
  for (size_t i = ev.size(); i-- > 0;) {
    r.lo[i] = std::min(r.lo[i + 1], sum);  // sum = cumulative up to and including event i
    r.hi[i] = std::max(r.hi[i + 1], sum);
    sum -= ev[i].second;
  }
  return r;
}

// A balance that the rest of the recording never brings back to where it was last zero (base) is not
// outstanding pipeline traffic: every activation's gradient returns within its iteration (the optimizer
// step needs them all), so a pipeline's balance comes back at least once per iteration. What never comes
// back is one-way data outside the training loop, e.g. DDP's initial parameter broadcast from rank 0 (2.16
// MB n0 -> n1 before the first step in tests/data/dp2_read_as_pp/ddp2_strag: left in the balance, it held
// the reverse orientation negative 98.7 % of the time and a DP2 job read as a pipeline; reset, 6.3 %). The
// pipeline edges of every kept sample stay above 0.69 (most within 0.01 of their old share): a young
// window's last activations in flight are never answered either, but they come after its last quiet gap.
bool unanswered(double bal, double base, const SuffixRange& future, size_t i, double tol) {
  if (bal < 0) return future.hi[i] < base - tol;
  return future.lo[i] > base + tol;
}

}  // namespace

// Volumes are not rescaled: activations and their gradients, and the two halves of a DP exchange, have equal
// sizes. At every quiet gap a residue below eps (a retransmission, headers) is reset so that it cannot
// accumulate over a long run, and so is a balance that is never answered (see unanswered()).
EdgeBalance edge_balance(const std::vector<const Xfer*>& xs, const std::vector<Episode>& episodes, uint32_t u,
                         double eps) {
  EdgeBalance out;
  if (episodes.size() < 2) return out;
  std::vector<std::pair<uint64_t, double>> ev;
  for (const Xfer* x : xs) {
    if (x->src == u)
      ev.emplace_back(x->t0, static_cast<double>(x->bytes));
    else
      ev.emplace_back(x->t1, -static_cast<double>(x->bytes));
  }
  // Snap points: the start of every episode after the first, with the volume of the episode that ended.
  std::vector<std::pair<uint64_t, double>> snap;
  for (size_t k = 1; k < episodes.size(); ++k)
    snap.emplace_back(xs[episodes[k].first]->t0, episodes[k - 1].bytes);
  std::sort(ev.begin(), ev.end());
  uint64_t lo = xs.front()->t0, hi = ev.back().first;
  if (hi <= lo) return out;
  const SuffixRange future = suffix_range(ev);
  double bal = 0, raw = 0, neg = 0;
  int side = 0;  // -1 below -eps, +1 above eps, 0 within
  size_t sn = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    while (sn < snap.size() && snap[sn].first <= ev[i].first) {
      const double tol = std::max(eps, kResidueShare * snap[sn].second);
      if (std::fabs(bal) < tol || unanswered(bal, raw - bal, future, i, tol)) bal = 0;
      ++sn;
    }
    bal += ev[i].second;
    raw += ev[i].second;
    const int now = bal < -eps ? -1 : bal > eps ? 1 : 0;
    if (now != side && now != 0) ++(now < 0 ? out.below : out.above);
    if (now == 1 && side == -1) ++out.crossing_above;
    side = now;
    uint64_t next = i + 1 < ev.size() ? ev[i + 1].first : hi;
    if (bal < -eps) neg += static_cast<double>(next - ev[i].first);
  }
  out.negative_share = neg / static_cast<double>(hi - lo);
  return out;
}

}  // namespace netprism::analysis
