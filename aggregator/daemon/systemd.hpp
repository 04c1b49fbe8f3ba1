// systemd integration of netprism-aggregator (Type=notify units): readiness once every endpoint is bound and
// the store loaded, STOPPING on shutdown, and the watchdog (WatchdogSec=) fed only while the daemon makes
// progress -- a wedged analysis or query thread gets the service restarted instead of silently serving stale
// results. Outside systemd (no $NOTIFY_SOCKET) every call is a no-op.
#pragma once

#include <signal.h>

#include <functional>
#include <string>

namespace netprism::daemon {

void notify_ready(const std::string& status);
void notify_stopping();

// Waits for one of `sigs` (blocked in every thread) and returns it. Meanwhile, when systemd asked for a
// watchdog, pings it every half interval as long as healthy() says so.
int wait_for_stop_signal(const sigset_t& sigs, const std::function<bool()>& healthy);

}  // namespace netprism::daemon
