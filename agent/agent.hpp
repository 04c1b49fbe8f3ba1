// The agent's event loop: probe ring buffer, RDMA sampling, batching, delivery, overload control and clock
// calibration on one thread, driven by epoll over the ring buffer fd, a timerfd, a signalfd and the ZeroMQ
// socket's fd.
#pragma once

#include "options.hpp"

namespace netprism::agent {

// Runs until SIGINT/SIGTERM. Returns the process exit code.
int run_agent(const AgentOptions& opts);

}  // namespace netprism::agent
