#include "systemd.hpp"

#include <systemd/sd-daemon.h>
#include <time.h>

#include <cerrno>

namespace netprism::daemon {

void notify_ready(const std::string& status) {
  sd_notify(0, ("READY=1\nSTATUS=" + status).c_str());
}

void notify_stopping() {
  sd_notify(0, "STOPPING=1");
}

int wait_for_stop_signal(const sigset_t& sigs, const std::function<bool()>& healthy) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) {
    int sig = 0;
    sigwait(&sigs, &sig);
    return sig;
  }
  // Half the interval, as sd_watchdog_enabled(3) recommends: one late ping does not trip it.
  const uint64_t half = usec / 2;
  const timespec period{static_cast<time_t>(half / 1000000), static_cast<long>(half % 1000000) * 1000};
  for (;;) {
    const int sig = sigtimedwait(&sigs, nullptr, &period);
    if (sig > 0) return sig;
    if (sig < 0 && errno != EAGAIN && errno != EINTR) return SIGTERM;  // cannot wait: stop cleanly
    if (healthy()) sd_notify(0, "WATCHDOG=1");
  }
}

}  // namespace netprism::daemon
