#include "clock.hpp"

#include <dirent.h>
#include <sys/timex.h>
#include <time.h>

#include <fstream>
#include <limits>

namespace netprism::agent {
namespace {
uint64_t read_clock(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

uint64_t mono_now_ns() {
  return read_clock(CLOCK_MONOTONIC);
}
uint64_t real_now_ns() {
  return read_clock(CLOCK_REALTIME);
}

int64_t MonoToRealtime::calibrate() {
  // Bracket a monotonic read between two realtime reads and keep the tightest of a few tries: a preemption
  // between the reads would otherwise put microseconds of error into every timestamp until the next
  // calibration. Seven tries make a clean window all but certain even on a loaded machine, at ~1 us cost.
  constexpr int kTries = 7;
  uint64_t best_width = std::numeric_limits<uint64_t>::max();
  int64_t best_off = offset_ns_;
  for (int i = 0; i < kTries; ++i) {
    uint64_t r0 = read_clock(CLOCK_REALTIME);
    uint64_t m = read_clock(CLOCK_MONOTONIC);
    uint64_t r1 = read_clock(CLOCK_REALTIME);
    if (r1 < r0) continue;  // realtime stepped backwards mid-read: retry
    uint64_t width = r1 - r0;
    if (width < best_width) {
      best_width = width;
      best_off = static_cast<int64_t>(r0 + width / 2) - static_cast<int64_t>(m);
    }
  }
  int64_t moved = best_off - offset_ns_;
  offset_ns_ = best_off;
  uncertainty_ns_ = best_width;
  return moved;
}

ClockInfo classify_clock(bool chronyd, bool ptp, bool ntpd, bool timesyncd, bool kernel_synced,
                         int64_t kernel_esterror_us) {
  ClockInfo c;
  // PTP first: where ptp4l/phc2sys run they discipline the clock even if chrony also runs (chrony then
  // usually reads the PHC as a refclock, which is still PTP time).
  if (ptp)
    c.source = "ptp";
  else if (chronyd)
    c.source = "chrony";
  else if (ntpd || timesyncd)
    c.source = "ntp";
  else
    c.source = "unknown";
  c.synced = kernel_synced;
  c.est_error_ns = kernel_synced && kernel_esterror_us >= 0 ? kernel_esterror_us * 1000 : -1;
  return c;
}

ClockInfo read_clock_discipline(const std::string& proc_root) {
  bool chronyd = false, ptp = false, ntpd = false, timesyncd = false;
  if (DIR* d = opendir(proc_root.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::ifstream f(proc_root + "/" + e->d_name + "/comm");
      std::string comm;
      if (!std::getline(f, comm)) continue;
      if (comm == "chronyd") chronyd = true;
      if (comm == "ptp4l" || comm == "phc2sys") ptp = true;
      if (comm == "ntpd") ntpd = true;
      if (comm == "systemd-timesyn") timesyncd = true;  // comm is cut at 15 characters
    }
    closedir(d);
  }
  // adjtimex with modes 0 only reads. STA_UNSYNC is cleared by whichever daemon disciplines the clock
  // (chronyd, ntpd, phc2sys with -r) and set again by the kernel when maxerror grows past 16 s.
  timex tx{};
  int state = adjtimex(&tx);
  bool synced = state != -1 && state != TIME_ERROR && !(tx.status & STA_UNSYNC);
  return classify_clock(chronyd, ptp, ntpd, timesyncd, synced, state == -1 ? -1 : tx.esterror);
}

}  // namespace netprism::agent
