// The live analysis' pacing (aggregator/daemon/cpu_share.hpp), offline with made-up times: passes within the
// share run at the interval; one long pass is absorbed by the bank; a sustained overdraw is held to the
// share.
#include <gtest/gtest.h>

#include "daemon/cpu_share.hpp"

using namespace netprism::daemon;
using namespace std::chrono_literals;

namespace {

constexpr auto kInterval = 1000ms;

TEST(CpuShare, PassesWithinTheShareRunAtTheInterval) {
  CpuShare pace(1.0 / 3, 3s);
  CpuShare::Clock::time_point t{};
  for (int i = 0; i < 100; ++i) {
    auto next = pace.after_pass(t, 300ms, kInterval);
    EXPECT_EQ(next - t, kInterval) << "pass " << i;
    t = next;
  }
}

TEST(CpuShare, OneLongPassIsAbsorbedByTheBank) {
  CpuShare pace(1.0 / 3, 3s);
  CpuShare::Clock::time_point t{};
  for (int i = 0; i < 10; ++i) t = pace.after_pass(t, 100ms, kInterval);
  auto next = pace.after_pass(t, 1100ms, kInterval);  // the 512-node job's re-analysis
  EXPECT_EQ(next - t, kInterval);                     // not 3.3 s
  t = next;
  for (int i = 0; i < 10; ++i) {  // cheap passes after it keep the interval while the bank refills
    next = pace.after_pass(t, 100ms, kInterval);
    EXPECT_EQ(next - t, kInterval);
    t = next;
  }
  EXPECT_EQ(pace.credit(), 3s - 100ms);  // refilled to the cap, less the last pass
}

TEST(CpuShare, SustainedOverdrawIsHeldToTheShare) {
  CpuShare pace(1.0 / 3, 3s);
  CpuShare::Clock::time_point start{}, t = start;
  std::chrono::nanoseconds used{};
  for (int i = 0; i < 1000; ++i) {  // every pass wants a whole second of CPU
    t = pace.after_pass(t, 1s, kInterval);
    used += 1s;
  }
  const double share = std::chrono::duration<double>(used - 3s).count() /  // the bank's burst aside
                       std::chrono::duration<double>(t - start).count();
  EXPECT_NEAR(share, 1.0 / 3, 1e-3);
}

}  // namespace
