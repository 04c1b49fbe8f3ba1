// One-line log messages on stderr (the service manager's journal captures them), with a rate limit for
// messages an outsider can trigger at will (malformed frames), so a flood cannot fill the disk.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace netprism::daemon {

enum class Level { kInfo, kWarning, kError };

void log_line(const std::string& msg);  // at Level::kInfo
// On the journal the line carries its syslog priority (netprism/journal.hpp).
void log_at(Level level, const std::string& msg);

class RateLimitedLog {
 public:
  // At most `per_second` lines per second; the rest are counted and summarised in the next line printed.
  explicit RateLimitedLog(int per_second) : per_second_(per_second) {}
  void log(const std::string& msg);

 private:
  int per_second_;
  int in_window_ = 0;
  uint64_t suppressed_ = 0;
  std::chrono::steady_clock::time_point window_{};
};

uint64_t now_unix_ns();

}  // namespace netprism::daemon
