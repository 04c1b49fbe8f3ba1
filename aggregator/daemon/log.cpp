#include "log.hpp"

#include <time.h>

#include <cstdio>

#include "netprism/journal.hpp"

namespace netprism::daemon {

uint64_t now_unix_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void log_line(const std::string& msg) {
  log_at(Level::kInfo, msg);
}

void log_at(Level level, const std::string& msg) {
  const int priority = level == Level::kInfo      ? 6
                       : level == Level::kWarning ? 4
                                                  : 3;  // syslog's LOG_INFO etc.
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  gmtime_r(&ts.tv_sec, &t);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &t);
  std::fprintf(stderr, "%s%s.%03ldZ netprism-aggregator: %s\n", journal_prefix(priority), stamp,
               ts.tv_nsec / 1000000, msg.c_str());
}

void RateLimitedLog::log(const std::string& msg) {
  auto now = std::chrono::steady_clock::now();
  if (now - window_ >= std::chrono::seconds(1)) {
    window_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= per_second_) {
    suppressed_++;
    return;
  }
  in_window_++;
  if (suppressed_ > 0) {
    log_line(msg + " (" + std::to_string(suppressed_) + " similar lines suppressed before this one)");
    suppressed_ = 0;
  } else {
    log_line(msg);
  }
}

}  // namespace netprism::daemon
