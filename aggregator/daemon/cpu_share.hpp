// How the live analysis paces its passes: at most a share of one core on average, with a bank of CPU time
// that lets one long pass be followed by passes at the normal interval while the average stays within the
// share. Pure (times are passed in), so the pacing is tested offline (tests/aggregator/cpu_share_test.cpp).
//
// Why a bank and not "wait N times the last pass' CPU time": at the target cluster of issue 20 the one
// 512-node job's re-analysis takes ~1.1 s of CPU (a 600,000-transfer tail); spacing the next pass 3x that
// held every other job's new iterations back 3.3 s after each of them (visibility p95 5.4-6.1 s in
// bench/README.md) although the analysis used 0.25 of a core on average, under its third.
#pragma once

#include <algorithm>
#include <chrono>

namespace netprism::daemon {

class CpuShare {
 public:
  using Clock = std::chrono::steady_clock;
  using ns = std::chrono::nanoseconds;

  // share: of one core, in (0, 1]; bank: CPU time that may be used above the share in a burst (the average
  // over any wall-clock window W is then at most share + bank / W).
  CpuShare(double share, ns bank) : share_(share), bank_(bank), credit_(bank) {}

  // A pass started at `start` and used `cpu`; returns when the next may start: `interval` after this one,
  // or later if the pass overdrew the bank (then when the share has paid the overdraft back).
  Clock::time_point after_pass(Clock::time_point start, ns cpu, ns interval) {
    if (has_last_) credit_ = std::min<ns>(bank_, credit_ + scaled(start - last_start_));
    has_last_ = true;
    last_start_ = start;
    credit_ -= cpu;
    ns wait = interval;
    if (credit_ < ns(0)) wait = std::max(wait, ns(static_cast<ns::rep>(-credit_.count() / share_)));
    return start + wait;
  }
  ns credit() const { return credit_; }

 private:
  ns scaled(Clock::duration d) const {
    return ns(static_cast<ns::rep>(static_cast<double>(std::chrono::duration_cast<ns>(d).count()) * share_));
  }
  double share_;
  ns bank_;
  ns credit_;
  bool has_last_ = false;
  Clock::time_point last_start_{};
};

}  // namespace netprism::daemon
