#include "budget.hpp"

#include <sys/resource.h>

namespace netprism::agent {

BudgetLevel Budget::level_for(int level) {
  switch (level) {
    case 0:
      return {0, 1, 1};
    case 1:
      return {1, 4, 1};
    case 2:
      return {2, 4, 4};
    default:
      return {3, 10, 16};
  }
}

bool Budget::observe(uint64_t cpu_ns, uint64_t records, uint64_t wall_ns) {
  if (wall_ns == 0) return false;
  last_cpu_ = 100.0 * static_cast<double>(cpu_ns) / static_cast<double>(wall_ns);
  last_rate_ = static_cast<double>(records) * 1e9 / static_cast<double>(wall_ns);
  bool over = last_cpu_ > o_.cpu_percent || last_rate_ > o_.max_records_per_sec;
  bool well_under = last_cpu_ < o_.cpu_percent / 2 && last_rate_ < o_.max_records_per_sec / 2;
  if (over) ++over_windows_;
  over_run_ = over ? over_run_ + 1 : 0;
  under_run_ = well_under ? under_run_ + 1 : 0;
  if (over_run_ >= o_.windows_to_degrade && level_ < kMaxLevel) {
    ++level_;
    ++degrade_steps_;
    over_run_ = 0;
    return true;
  }
  if (under_run_ >= o_.windows_to_recover && level_ > 0) {
    --level_;
    ++recover_steps_;
    under_run_ = 0;
    return true;
  }
  return false;
}

uint64_t process_cpu_ns() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto ns = [](const timeval& t) {
    return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_usec) * 1000ull;
  };
  return ns(ru.ru_utime) + ns(ru.ru_stime);
}

}  // namespace netprism::agent
