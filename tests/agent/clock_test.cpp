#include "clock.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "agent/test_util.hpp"

using namespace netprism::agent;

TEST(Clock, MonotonicConvertsToUnixEpoch) {
  MonoToRealtime c;
  uint64_t mono = mono_now_ns();
  uint64_t real = real_now_ns();
  int64_t diff = static_cast<int64_t>(c.to_realtime(mono)) - static_cast<int64_t>(real);
  // Two clock reads apart plus the calibration window: far below a millisecond on any machine.
  EXPECT_LT(std::llabs(diff), 1'000'000) << diff;
  EXPECT_GT(c.to_realtime(mono), 1'600'000'000'000'000'000ull);  // after 2020: a Unix-epoch value
  EXPECT_LT(c.uncertainty_ns(), 1'000'000u);
}

TEST(Clock, ConversionIsTheCalibratedOffset) {
  MonoToRealtime c;
  c.set_offset_for_test(1'700'000'000'000'000'000ll);
  EXPECT_EQ(c.to_realtime(5), 1'700'000'000'000'000'005ull);
  // Recalibration replaces the offset and reports how far it moved.
  int64_t moved = c.calibrate();
  EXPECT_EQ(moved, c.offset_ns() - 1'700'000'000'000'000'000ll);
  EXPECT_LT(std::llabs(static_cast<int64_t>(c.to_realtime(mono_now_ns()) - real_now_ns())), 1'000'000);
}

TEST(Clock, RecalibrationIsStable) {
  MonoToRealtime c;
  // Without a clock step, re-measuring moves the offset by no more than the measurement noise.
  for (int i = 0; i < 5; ++i) EXPECT_LT(std::llabs(c.calibrate()), 1'000'000);
}

TEST(Clock, DisciplineClassification) {
  EXPECT_EQ(classify_clock(true, false, false, false, true, 250).source, "chrony");
  EXPECT_EQ(classify_clock(true, false, false, false, true, 250).est_error_ns, 250'000);
  EXPECT_EQ(classify_clock(true, true, false, false, true, 1).source, "ptp");
  EXPECT_EQ(classify_clock(false, false, true, false, false, 5).source, "ntp");
  EXPECT_FALSE(classify_clock(false, false, true, false, false, 5).synced);
  EXPECT_EQ(classify_clock(false, false, true, false, false, 5).est_error_ns, -1);
  EXPECT_EQ(classify_clock(false, false, false, false, false, 0).source, "unknown");
}

TEST(Clock, DisciplineReadsRunningDaemons) {
  netprism::test::TempDir proc;
  std::filesystem::create_directories(proc / "1234");
  std::ofstream(proc / "1234/comm") << "chronyd\n";
  std::filesystem::create_directories(proc / "self");  // not a pid: ignored
  EXPECT_EQ(read_clock_discipline(proc.path()).source, "chrony");
  std::filesystem::create_directories(proc / "99");
  std::ofstream(proc / "99/comm") << "ptp4l\n";
  EXPECT_EQ(read_clock_discipline(proc.path()).source, "ptp");
  // The real machine: whatever it finds, it must not crash and must name a known source.
  auto real = read_clock_discipline();
  EXPECT_TRUE(real.source == "chrony" || real.source == "ptp" || real.source == "ntp" ||
              real.source == "unknown");
}
