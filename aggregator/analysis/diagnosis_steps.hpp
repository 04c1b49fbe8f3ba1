// Steps of the diagnosis stage (diagnose, diagnosis.cpp) shared between its files: the straggler finding
// lives in diagnosis_straggler.cpp, the slow link in diagnosis_link.cpp, the slow iteration in
// diagnosis_iteration.cpp, the hang and the job state in diagnosis.cpp. Internal to the analysis library.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "stages.hpp"

namespace netprism::analysis::diagnosis_steps {

// The first two iterations seen carry warm-up (allocator growth, lazy initialisation, connection set-up);
// they are excluded from baselines and findings.
inline constexpr size_t kWarmup = 2;
// A fault is persistent when it holds in at least 3 consecutive iterations (see diagnosis_straggler.cpp for
// the straggler's reasons, diagnosis_link.cpp for the slow link's).
inline constexpr size_t kPersist = 3;

inline std::string fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}

inline std::string ms(double ns) {
  return fmt("%.1f ms", ns / 1e6);
}

// First run of `k` consecutive true values; -1 when none.
inline int first_run(const std::vector<char>& flags, size_t k = kPersist) {
  size_t run = 0;
  for (size_t i = 0; i < flags.size(); ++i) {
    run = flags[i] ? run + 1 : 0;
    if (run >= k) return static_cast<int>(i + 1 - k);
  }
  return -1;
}

// Slow-iteration findings (diagnosis_iteration.cpp): iterations far above the baseline whose excess one rank
// or link accounts for.
void slow_iteration_findings(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                             const std::vector<Iteration>& its, const std::string& job_id,
                             std::vector<Finding>& out);

// Slow-link findings (diagnosis_link.cpp), one per direction; diagnose() merges the two directions of a pair.
void slow_link_findings(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                        size_t iters, std::vector<Finding>& out);

// Straggler findings (diagnosis_straggler.cpp), before they are weighed against the slow links near them
// (diagnose(), diagnosis.cpp).
void straggler_findings(const Normalized& n, const JobSlice& job, const Structure& s, const Timeline& t,
                        const std::vector<Iteration>& its, std::vector<Finding>& out);

}  // namespace netprism::analysis::diagnosis_steps
