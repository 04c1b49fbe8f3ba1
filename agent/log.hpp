// The agent's log: one line per event on stderr, prefixed with the program name and a severity, so journald
// and test drivers can grep it. Nothing the agent drops or degrades goes unlogged; repeated events are
// rate-limited by their callers (a counter carries the exact number).
#pragma once

#include <iostream>
#include <mutex>
#include <sstream>
#include <string>

#include "netprism/journal.hpp"

namespace netprism::agent {

enum class Level { kInfo, kWarn, kError };

inline void log(Level lvl, const std::string& msg) {
  static std::mutex mu;
  const char* tag = lvl == Level::kInfo ? "info" : lvl == Level::kWarn ? "warning" : "error";
  const int priority = lvl == Level::kInfo ? 6 : lvl == Level::kWarn ? 4 : 3;  // syslog's LOG_INFO etc.
  std::lock_guard lk(mu);
  std::cerr << journal_prefix(priority) << "netprism-agent: " << tag << ": " << msg << "\n";
}

inline void log_info(const std::string& m) {
  log(Level::kInfo, m);
}
inline void log_warn(const std::string& m) {
  log(Level::kWarn, m);
}
inline void log_error(const std::string& m) {
  log(Level::kError, m);
}

}  // namespace netprism::agent
