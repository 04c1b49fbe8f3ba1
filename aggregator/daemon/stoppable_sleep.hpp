// Sleeping in a background thread that must stop promptly: the ClickHouse sink and analyser between rounds,
// the webhooks' poll.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>

namespace netprism::daemon {

// Sleeps up to d, waking early on stop.
inline void nap(std::stop_token st, std::chrono::milliseconds d) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lk(m);
  cv.wait_for(lk, st, d, [] { return false; });
}

}  // namespace netprism::daemon
