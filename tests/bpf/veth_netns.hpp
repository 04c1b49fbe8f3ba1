// A veth pair with one end in a fresh network namespace, for kernel tests and benchmarks: unique names per
// run (pid + random), private /30 addresses inside 10.213.0.0/16, removed by the destructor on every path.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>

namespace netprism::test {

// An owned socket descriptor, closed on every path; fd is -1 when the call that made it failed.
struct Socket {
  int fd = -1;
  explicit Socket(int f) : fd(f) {}
  ~Socket() {
    if (fd >= 0) close(fd);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
};

inline sockaddr_in addr_of(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

inline int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

class VethNetns {
 public:
  VethNetns() {
    std::random_device rd;
    unsigned r = rd();
    std::string tag = std::to_string(getpid() % 100000) + "x" + std::to_string(r % 1000);
    ns = "npns" + tag;
    host_if = "nph" + tag;  // IFNAMSIZ: 15 characters at most
    ns_if = "npn" + tag;
    unsigned x = (r >> 10) % 256, k = (r >> 18) % 63;
    host_ip = "10.213." + std::to_string(x) + "." + std::to_string(4 * k + 1);
    ns_ip = "10.213." + std::to_string(x) + "." + std::to_string(4 * k + 2);
    created_ = true;
    if (sh("ip netns add " + ns) != 0) throw std::runtime_error("ip netns add " + ns + " failed");
    run("ip link add " + host_if + " type veth peer name " + ns_if);
    run("ip link set " + ns_if + " netns " + ns);
    run("ip addr add " + host_ip + "/30 dev " + host_if);
    run("ip link set " + host_if + " up");
    run("ip -n " + ns + " addr add " + ns_ip + "/30 dev " + ns_if);
    run("ip -n " + ns + " link set " + ns_if + " up");
    run("ip -n " + ns + " link set lo up");
    ns_fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (ns_fd < 0) throw std::runtime_error("cannot open netns " + ns);
  }
  ~VethNetns() { cleanup(); }
  VethNetns(const VethNetns&) = delete;
  VethNetns& operator=(const VethNetns&) = delete;

  // Moves the calling thread into the namespace (network namespaces are per thread).
  void enter() const {
    if (setns(ns_fd, CLONE_NEWNET) != 0) throw std::runtime_error("setns " + ns + " failed");
  }

  std::string ns, host_if, ns_if, host_ip, ns_ip;
  int ns_fd = -1;

 private:
  void run(const std::string& cmd) {
    if (sh(cmd) != 0) {
      cleanup();  // the destructor does not run when the constructor throws
      throw std::runtime_error("failed: " + cmd);
    }
  }
  void cleanup() {
    if (ns_fd >= 0) close(ns_fd);
    ns_fd = -1;
    if (!created_) return;
    created_ = false;
    sh("ip link del " + host_if);  // removes both ends
    sh("ip netns del " + ns);
  }
  bool created_ = false;
};

}  // namespace netprism::test
