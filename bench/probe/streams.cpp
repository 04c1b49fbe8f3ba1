#include "streams.hpp"

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace netprism::bench {
namespace {

// The benchmark cannot measure anything without its sockets: a failed socket()/accept() ends the run.
struct Sock : test::Socket {
  explicit Sock(int f) : Socket(f) {
    if (fd < 0) throw std::runtime_error("socket");
  }
};

using test::addr_of;

using Clock = std::chrono::steady_clock;

}  // namespace

namespace {

// Pins the calling thread to one CPU for its lifetime, then gives it back the CPUs it had.
struct PinTo {
  cpu_set_t old{};
  bool active = false;
  PinTo(bool want, int cpu) {
    if (!want || std::thread::hardware_concurrency() < 2) return;
    if (pthread_getaffinity_np(pthread_self(), sizeof old, &old) != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    active = pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  }
  ~PinTo() {
    if (active) pthread_setaffinity_np(pthread_self(), sizeof old, &old);
  }
  PinTo(const PinTo&) = delete;
  PinTo& operator=(const PinTo&) = delete;
};

}  // namespace

namespace {

// The receiving end of a TCP stream: a thread in the namespace (pinned to CPU 1 when asked) that accepts one
// connection and counts what arrives until the sender closes. The destructor waits for it.
class TcpSink {
 public:
  TcpSink(const test::VethNetns& net, const StreamOptions& opt)
      : rx_([this, &net, pin = opt.pin] { run(net, pin); }) {
    while (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~TcpSink() { rx_.join(); }
  TcpSink(const TcpSink&) = delete;
  TcpSink& operator=(const TcpSink&) = delete;

  bool failed() const { return failed_; }
  uint16_t port() const { return port_; }
  uint64_t got() const { return got_.load(std::memory_order_relaxed); }

 private:
  void run(const test::VethNetns& net, bool pin_it) {
    try {
      PinTo pin(pin_it, 1);
      net.enter();
      Sock ls(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      auto a = addr_of(net.ns_ip, 0);
      socklen_t len = sizeof a;
      if (bind(ls.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(ls.fd, 1) ||
          getsockname(ls.fd, reinterpret_cast<sockaddr*>(&a), &len))
        throw std::runtime_error("listen");
      timeval tv{5, 0};  // never hang the benchmark if the sender cannot connect
      setsockopt(ls.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      port_ = ntohs(a.sin_port);
      Sock c(accept(ls.fd, nullptr, nullptr));
      std::vector<char> buf(1 << 18);
      for (ssize_t r; (r = recv(c.fd, buf.data(), buf.size(), 0)) > 0;)
        got_.fetch_add(static_cast<uint64_t>(r), std::memory_order_relaxed);
    } catch (...) {
      failed_ = true;
      port_ = 1;
    }
  }

  std::atomic<uint16_t> port_{0};
  std::atomic<uint64_t> got_{0};
  std::atomic<bool> failed_{false};
  std::thread rx_;  // last: starts once the members it uses exist
};

bool connect_to(const Sock& s, const test::VethNetns& net, uint16_t port) {
  auto a = addr_of(net.ns_ip, port);
  return connect(s.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
}

}  // namespace

StreamResult tcp_stream(const test::VethNetns& net, double seconds, const StreamOptions& opt) {
  StreamResult res;
  TcpSink sink(net, opt);
  if (sink.failed()) return res;
  PinTo pin(opt.pin, 0);
  Sock s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!connect_to(s, net, sink.port())) return res;
  std::vector<char> buf(1 << 16, 'x');
  auto t0 = Clock::now();
  auto until = t0 + std::chrono::duration<double>(seconds);
  uint64_t start_got = sink.got();
  while (Clock::now() < until)
    if (send(s.fd, buf.data(), buf.size(), MSG_NOSIGNAL) <= 0) break;
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  res.bytes = sink.got() - start_got;  // what arrived within the window
  return res;                          // closing s ends the sink
}

std::vector<StreamResult> tcp_stream_phased(const test::VethNetns& net, int phases, double phase_seconds,
                                            double settle, const std::function<void(int)>& set_phase,
                                            const StreamOptions& opt) {
  std::vector<StreamResult> out;
  TcpSink sink(net, opt);
  if (sink.failed()) return out;
  std::atomic<bool> connected{false}, tx_failed{false}, stop{false};
  std::thread tx([&] {
    PinTo pin(opt.pin, 0);
    Sock s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!connect_to(s, net, sink.port())) {
      tx_failed = true;
      return;
    }
    connected = true;
    std::vector<char> buf(1 << 16, 'x');
    while (!stop)
      if (send(s.fd, buf.data(), buf.size(), MSG_NOSIGNAL) <= 0) break;
  });
  while (!connected && !tx_failed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!tx_failed) {
    auto pause = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
    for (int k = 0; k < phases; ++k) {
      set_phase(k);
      pause(settle);
      uint64_t b0 = sink.got();
      auto t0 = Clock::now();
      pause(phase_seconds);
      StreamResult r;
      r.bytes = sink.got() - b0;
      r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      out.push_back(r);
    }
  }
  stop = true;
  tx.join();  // the sender's close ends the sink
  return out;
}

StreamResult roce_stream(const test::VethNetns& net, double seconds) {
  std::atomic<bool> ready{false}, stop{false};
  std::atomic<uint64_t> got{0}, pkts{0};
  std::thread rx([&] {
    net.enter();
    Sock s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    auto a = addr_of(net.ns_ip, 4791);
    bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    timeval tv{0, 100000};
    setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ready = true;
    std::vector<char> buf(4096);
    while (!stop) {
      ssize_t r = recv(s.fd, buf.data(), buf.size(), 0);
      if (r > 0) {
        got += static_cast<uint64_t>(r);
        ++pkts;
      }
    }
  });
  while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  StreamResult res;
  {
    Sock s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    auto a = addr_of(net.ns_ip, 4791);
    connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    // BTH: RC RDMA WRITE middle (0x07), dest QP 0x000011, PSN counting up; then 1024 bytes + ICRC.
    std::vector<unsigned char> dgram(12 + 1024 + 4, 0xab);
    const unsigned char bth[12] = {0x07, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 0};
    std::copy(bth, bth + 12, dgram.begin());
    auto t0 = Clock::now();
    auto until = t0 + std::chrono::duration<double>(seconds);
    for (uint32_t psn = 0; Clock::now() < until; ++psn) {
      for (int i = 0; i < 64; ++i, ++psn) {
        dgram[9] = static_cast<unsigned char>(psn >> 16);
        dgram[10] = static_cast<unsigned char>(psn >> 8);
        dgram[11] = static_cast<unsigned char>(psn);
        send(s.fd, dgram.data(), dgram.size(), 0);
      }
    }
    res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  stop = true;
  rx.join();
  res.bytes = got;
  res.packets = pkts;
  return res;
}

}  // namespace netprism::bench
