// Iterations of FSDP / ZeRO-3 traffic: the period of the pattern of quiets, measured in DP volume.
//
// Under FSDP / ZeRO-3 a DP group communicates all through the iteration: every unit's parameters are
// all-gathered before its forward and again before its backward, its gradient reduce-scattered after its
// backward. The quiets between the collectives are the units' compute (forward, then about twice as long in
// the backward) and the optimizer step; none of them is the longest of every iteration, so the reading by
// the longest quiets (iteration_volume.cpp) finds nothing, and every collective looks like a
// synchronisation of its own (a real OpenMPI FSDP run: 83 iterations read for 13).
//
// What every such job keeps: each iteration moves the same DP volume (every parameter gathered twice, every
// gradient reduced once: a constant times the parameters; measured 35.6-36.6 MB per iteration in that run,
// load average 11) in the same order of collectives, so its pattern of quiets repeats every iteration's
// volume. Measured in volume rather than time, the repetition survives a loaded host that stretches some
// iterations by 70 % (time-based periods do not). The period is the shortest volume lag at which most
// quiets recur with a similar length; the per-unit lag matches only inside runs of like units (forward vs
// backward quiets differ 2x), so it scores lower (0.26-0.35 against 0.65 in that run). The boundaries then
// follow the volume clock: one every period from the group's first DP burst (a job's first DP traffic opens
// its first iteration's forward pass), each snapped to the collective end nearest its volume.
//
// Limit: the phase comes from the first burst in view. A recording that starts in the middle of a job (or a
// live window that no longer holds its start) gets the right durations but boundaries at another point of
// the iteration than the end of its last reduce-scatter.
#include "iteration_period.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "debug_log.hpp"
#include "stats.hpp"

namespace netprism::analysis::iteration_period {
namespace {

// A quiet recurs when its repetition one iteration later is within 1.5x of it: a unit's compute repeats
// within that under load (forward quiets 37-47 ms at load 11), while a forward and a backward quiet differ by
// about 2x (the backward computes gradients of inputs and weights).
constexpr double kQuietRepeat = 1.5;
// Volume tolerance of a repetition, as a share of the lag: the volume between two like collective ends
// varies by 1.4 % (pieces of a collective finishing after a rank's quiet began), and a collective is a few
// percent of an iteration (a third of the parameters' volume per unit or less), so 2 % tells them apart.
constexpr double kVolumeTolerance = 0.02;
// The period: at least 40 % of the quiets recur (0.67 in the FSDP run, where descheduled ranks split some
// collectives; 0.46 in a Horovod-style run whose straggler, x1.4 from its 6th iteration, lengthened part of
// its quiets), and within 0.75 of the best lag (multiples of the period score alike, and the shortest is
// taken; a unit of the FSDP run, 0.33-0.35, is below both).
constexpr double kMinRecurring = 0.4;
constexpr double kNearBest = 0.75;
// Three periods in view at least: the fewest from which a timeline is made (see job_grouping).
constexpr double kMinPeriods = 3;
// An iteration end is the collective end nearest its target volume, within a tenth of the period (a lost
// collective end leaves the target in the middle of a quiet-free stretch; the clock then runs on).
constexpr double kSnap = 0.1;

// The quiets are one class (every one significant) when Otsu's two classes are within 2.5x (geometric
// means): a job's compute quiets differ by about 2x (forward vs backward units) and stay one class.
// Measured: 1.0-1.3x in synthetic and third-party (SimAI) data, whose quiets are all alike and which a forced
// split cut at random; 4.4-375x in every kept recording (fragments vs compute), live passes included.
constexpr double kOneClass = 2.5;

// Otsu split of the log-quiets: quiets inside a collective (fragments a descheduled rank leaves, ~4 ms) vs
// between collectives (compute, ~35 ms) in the FSDP run. Returns the threshold in ns.
double quiet_threshold(const std::vector<double>& quiet) {
  std::vector<double> g;
  for (double q : quiet)
    if (q > 0) g.push_back(std::log(q));
  if (g.size() < 2) return 0;
  std::sort(g.begin(), g.end());
  const OtsuSplit o = otsu_split(g);
  const size_t cut = o.cut;
  if (debug::lines_on()) {
    std::string l;
    debug::appendf(l, "  quiet classes: %.2fx apart (%zu / %zu)", std::exp(o.upper_mean() - o.lower_mean()),
                   cut, g.size() - cut);
    debug::line(l);
  }
  if (o.upper_mean() - o.lower_mean() < std::log(kOneClass)) return 0;
  return std::exp((g[cut - 1] + g[cut]) / 2);
}

// Share of the quiets that recur at volume lag L (and the matched lags, for the refined period).
double recurring_at(const std::vector<Quiet>& s, double L, std::vector<double>* lags) {
  double tol = kVolumeTolerance * L;
  size_t judged = 0, found = 0;
  for (const Quiet& q : s) {
    if (q.cum + L + tol > s.back().cum) break;
    ++judged;
    auto it = std::lower_bound(s.begin(), s.end(), q.cum + L - tol,
                               [](const Quiet& a, double v) { return a.cum < v; });
    for (; it != s.end() && it->cum <= q.cum + L + tol; ++it)
      if (it->len <= kQuietRepeat * q.len && q.len <= kQuietRepeat * it->len) {  // within 1.5x either way
        ++found;
        if (lags) lags->push_back(it->cum - q.cum);
        break;
      }
  }
  return judged ? static_cast<double>(found) / static_cast<double>(judged) : 0;
}

// The period in volume: the shortest lag whose quiets recur (see kMinRecurring), refined to the median lag
// of its matches; 0 when none. `need`: the share a lag needed.
double period(const std::vector<Quiet>& s, double c0, double& need, double& best) {
  std::vector<double> gaps;
  for (size_t i = 0; i + 1 < s.size(); ++i) gaps.push_back(s[i + 1].cum - s[i].cum);
  double lo = median(gaps), hi = (s.back().cum - c0) / kMinPeriods;
  std::vector<std::pair<double, double>> scored;  // lag, share
  best = 0;
  for (double L = lo; L > 0 && L <= hi; L *= 1 + kVolumeTolerance) {
    scored.emplace_back(L, recurring_at(s, L, nullptr));
    best = std::max(best, scored.back().second);
  }
  need = std::max(kMinRecurring, kNearBest * best);
  for (size_t i = 0; i < scored.size(); ++i) {
    if (scored[i].second < need) continue;
    while (i + 1 < scored.size() && scored[i + 1].second > scored[i].second) ++i;  // the top of its peak
    std::vector<double> lags;
    recurring_at(s, scored[i].first, &lags);
    if (debug::lines_on()) {
      std::string l;
      debug::appendf(l, "  period: %.0f bytes, %.2f of the quiets recur (best lag %.2f)", median(lags),
                     scored[i].second, best);
      debug::line(l);
    }
    return median(std::move(lags));
  }
  return 0;
}

}  // namespace

std::vector<Quiet> significant_quiets(const std::vector<double>& cum, const std::vector<double>& quiet) {
  std::vector<Quiet> s;
  if (cum.size() < 3) return s;
  double thr = quiet_threshold(std::vector<double>(quiet.begin(), quiet.end() - 1));
  for (size_t j = 0; j + 1 < cum.size(); ++j)
    if (quiet[j] >= thr && quiet[j] > 0) s.push_back({cum[j], quiet[j], j});
  return s;
}

double recurring(const std::vector<Quiet>& s, double L) {
  return s.empty() ? 0 : recurring_at(s, L, nullptr);
}

Reading periodic_reading(const std::vector<Quiet>& quiets, const std::vector<double>& cum, double c0) {
  Reading r;
  if (quiets.size() < 3) return r;
  double V = period(quiets, c0, r.need, r.best);
  if (V <= 0) return r;
  // Candidate ends: the collective ends (a significant quiet after them) and the last burst (the job's last
  // iteration ends with its last DP traffic).
  std::vector<Quiet> s = quiets;
  size_t n = cum.size();
  s.push_back({cum[n - 1], 0, n - 1});
  for (double prev = c0; prev + (1 - kSnap) * V <= cum[n - 1];) {
    double target = prev + V;
    auto it =
        std::lower_bound(s.begin(), s.end(), target, [](const Quiet& a, double v) { return a.cum < v; });
    size_t k = static_cast<size_t>(it - s.begin());
    if (k == s.size() || (k > 0 && target - s[k - 1].cum < s[k].cum - target)) --k;
    if (std::fabs(s[k].cum - target) <= kSnap * V && (r.ends.empty() || s[k].burst > r.ends.back())) {
      r.ends.push_back(s[k].burst);
      r.closed = s[k].burst == n - 1 && std::fabs(s[k].cum - target) <= kVolumeTolerance * V;
      prev = s[k].cum;
    } else {
      prev = target;
    }
  }
  r.period = V;
  return r;
}

}  // namespace netprism::analysis::iteration_period
