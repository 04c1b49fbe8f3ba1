// A Linux eventfd that wakes a thread blocked in zmq::poll() (which polls plain file descriptors too): the
// ingest committer and the query workers hand their results back to the thread that owns the socket.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace netprism::daemon {

class EventFd {
 public:
  EventFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  }
  ~EventFd() { ::close(fd_); }
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  int fd() const { return fd_; }
  // Cannot fail short of a counter overflow (2^64 - 1 unread signals); a lost wake-up would only delay the
  // hand-over until the owner's next poll timeout (100 ms) anyway.
  void signal() {
    const uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
  }
  void clear() {
    uint64_t n;
    (void)!::read(fd_, &n, sizeof n);
  }

 private:
  int fd_;
};

}  // namespace netprism::daemon
