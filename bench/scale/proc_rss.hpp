// The benchmark's own resident set, from /proc/self/status (what the cost tables report as RSS).
#pragma once

#include <cstdio>

namespace netprism::bench {

inline long rss_mb() {
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  long kb = 0;
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %ld", &kb) == 1) break;
  if (f) std::fclose(f);
  return kb / 1024;
}

}  // namespace netprism::bench
