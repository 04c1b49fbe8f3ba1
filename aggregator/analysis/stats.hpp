// Robust statistics shared by the analysis stages (timeline, diagnosis, parallelism, the streaming engine):
// one definition each, so every stage rounds and breaks ties alike (the golden outputs depend on it).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace netprism::analysis {

// 1.4826 x MAD estimates the standard deviation of Gaussian noise (1 / Phi^-1(3/4)).
inline constexpr double kMadToSigma = 1.4826;

// Median; the mean of the two middle values for an even count; 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(m), v.end());
  double hi = v[m];
  if (v.size() % 2) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + static_cast<long>(m));
  return (lo + hi) / 2;
}

// Median absolute deviation of `v` around `med`.
inline double mad(const std::vector<double>& v, double med) {
  std::vector<double> d;
  d.reserve(v.size());
  for (double x : v) d.push_back(std::fabs(x - med));
  return median(std::move(d));
}

// Robust standard deviation of `v` around `med` (kMadToSigma x MAD).
inline double robust_sigma(const std::vector<double>& v, double med) {
  return kMadToSigma * mad(v, med);
}

// Robust standard deviation of a small sample around its own median: kMadToSigma x MAD times the
// small-sample correction b_n of Croux & Rousseeuw (1992, "Time-efficient algorithms for two highly robust
// estimators of scale"), which makes it unbiased for Gaussian samples of 2 to 9 values (n / (n - 0.8) above).
// MAD alone reads low for so few: with 3 values one deviation is always 0. 0 for fewer than 2 values.
inline double small_sample_sigma(const std::vector<double>& v) {
  static constexpr double kB[] = {0, 0, 1.196, 1.495, 1.363, 1.206, 1.200, 1.140, 1.129, 1.107};
  size_t n = v.size();
  if (n < 2) return 0;
  double b = n < 10 ? kB[n] : static_cast<double>(n) / (static_cast<double>(n) - 0.8);
  return b * robust_sigma(v, median(v));
}

// The k-th smallest (from 0) of the multiset s without e (e a part of s; both sorted): the first value of s
// at which s without e holds k + 1 values, by bisection, without copying s.
inline double kth_without(const std::vector<double>& s, const std::vector<double>& e, size_t k) {
  auto count_le = [&](double x) {
    return static_cast<size_t>(std::upper_bound(s.begin(), s.end(), x) - s.begin()) -
           static_cast<size_t>(std::upper_bound(e.begin(), e.end(), x) - e.begin());
  };
  size_t lo = 0, hi = s.size() - 1;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (count_le(s[mid]) >= k + 1)
      hi = mid;
    else
      lo = mid + 1;
  }
  return s[lo];
}

// median() of s without e (the reference of a node's links against the role's others, diagnosis_link.cpp),
// the same value (the same multiset), at the cost of e's size, not s's.
inline double median_without(const std::vector<double>& s, const std::vector<double>& e) {
  size_t n = s.size() - e.size();
  if (n == 0) return 0;
  if (n % 2) return kth_without(s, e, n / 2);
  return (kth_without(s, e, n / 2 - 1) + kth_without(s, e, n / 2)) / 2;
}

// Typical size of the messages in `sizes`: the median over those of at least a tenth of the largest, so
// that small control messages (notifications, barriers) riding the same connection do not drag it down.
inline double typical_size(std::vector<double> sizes) {
  if (sizes.empty()) return 0;
  double top = *std::max_element(sizes.begin(), sizes.end());
  std::erase_if(sizes, [&](double x) { return x < 0.1 * top; });
  return median(std::move(sizes));
}

// Differences between consecutive times (`times` in order): iteration durations from boundaries, the
// spacing of synchronisation ends.
inline std::vector<double> spacings(const std::vector<uint64_t>& times) {
  std::vector<double> d;
  for (size_t i = 0; i + 1 < times.size(); ++i) d.push_back(static_cast<double>(times[i + 1] - times[i]));
  return d;
}

// Otsu's split of sorted values (n >= 2) into two classes: the index of the upper class's first value, the
// cut maximising the between-class variance. Also the prefix sums it used, for the class means.
struct OtsuSplit {
  size_t cut = 1;
  std::vector<double> prefix;  // prefix[i]: sum of the first i values
  double lower_mean() const { return prefix[cut] / static_cast<double>(cut); }
  double upper_mean() const {
    return (prefix.back() - prefix[cut]) / static_cast<double>(prefix.size() - 1 - cut);
  }
};
inline OtsuSplit otsu_split(const std::vector<double>& sorted) {
  OtsuSplit o;
  size_t n = sorted.size();
  o.prefix.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) o.prefix[i + 1] = o.prefix[i] + sorted[i];
  double best = -1;
  for (size_t k = 1; k < n; ++k) {
    double m0 = o.prefix[k] / static_cast<double>(k);
    double m1 = (o.prefix[n] - o.prefix[k]) / static_cast<double>(n - k);
    double w = static_cast<double>(k) * static_cast<double>(n - k) * (m1 - m0) * (m1 - m0);
    if (w > best) {
      best = w;
      o.cut = k;
    }
  }
  return o;
}

}  // namespace netprism::analysis
