// Policy for tests that need the kernel: under CI they must run (and fail if the kernel refuses); only a
// developer without root may skip them, and the skip says why.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

namespace netprism::test {
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && *ci && std::strcmp(ci, "false") != 0 && std::strcmp(ci, "0") != 0;
}
}  // namespace netprism::test

#define NP_REQUIRE_ROOT()                                                                             \
  do {                                                                                                \
    if (geteuid() != 0) {                                                                             \
      if (::netprism::test::in_ci()) FAIL() << "this test needs root and CI must run it";             \
      GTEST_SKIP() << "needs root (loads BPF programs / creates namespaces); run as root to include"; \
    }                                                                                                 \
  } while (0)
