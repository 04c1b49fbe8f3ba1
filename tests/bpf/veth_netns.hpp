// A veth pair with one end in a fresh network namespace, for kernel tests and benchmarks: unique names per
// run (pid + random), private /30 addresses inside 10.213.0.0/16, removed by the destructor on every path,
// and by veth_signal's handler when a program that installed it is killed.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
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

// Clean-up when the process is killed (SIGINT, SIGTERM, SIGHUP, SIGPIPE): destructors do not run then, and
// the namespace and veth pair would outlive the process. The handler may only use async-signal-safe calls,
// so the names of the live pairs sit in fixed arrays and `ip` runs through fork + execve + waitpid.
namespace veth_signal {

struct LiveNet {
  std::atomic<int> state{0};  // 0 free, 1 claimed (names being written), 2 live
  char ns[32];
  char host_if[16];
};
inline LiveNet live[8];
// One more async-signal-safe action for the program (e.g. restore a sysctl it changed); may stay null.
inline void (*extra)() = nullptr;

inline void run_ip(const char* a1, const char* a2, const char* a3) {
  char* const argv[] = {const_cast<char*>("ip"), const_cast<char*>(a1), const_cast<char*>(a2),
                        const_cast<char*>(a3), nullptr};
  char* const envp[] = {nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) {
      dup2(null_fd, 1);
      dup2(null_fd, 2);
    }
    for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) execve(path, argv, envp);
    _exit(127);
  }
  if (pid > 0) waitpid(pid, nullptr, 0);
}

inline void on_signal(int sig) {
  for (auto& n : live) {
    int was = 2;
    if (!n.state.compare_exchange_strong(was, 0)) continue;
    run_ip("link", "del", n.host_if);  // removes both ends
    run_ip("netns", "del", n.ns);
  }
  if (extra) extra();
  // SA_RESETHAND restored the default action: re-raise so the exit status still says which signal it was.
  raise(sig);
}

// Call once, early in main(), before any thread starts.
inline void install() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&sa.sa_mask, s);  // one clean-up at a time
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaction(s, &sa, nullptr);
}

// Returns the slot now holding the names, or nullptr when all are taken (clean-up on signal then misses it).
inline LiveNet* add(const std::string& ns, const std::string& host_if) {
  for (auto& n : live) {
    int was = 0;
    if (!n.state.compare_exchange_strong(was, 1)) continue;
    std::snprintf(n.ns, sizeof n.ns, "%s", ns.c_str());
    std::snprintf(n.host_if, sizeof n.host_if, "%s", host_if.c_str());
    n.state = 2;
    return &n;
  }
  return nullptr;
}

// True when the caller still owns the clean-up (the signal handler did not take it).
inline bool remove(LiveNet* n) {
  if (!n) return true;
  int was = 2;
  return n->state.compare_exchange_strong(was, 0);
}

}  // namespace veth_signal

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
    live_ = veth_signal::add(ns, host_if);
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
    if (!veth_signal::remove(live_)) return;  // a signal handler already removed them
    sh("ip link del " + host_if);             // removes both ends
    sh("ip netns del " + ns);
  }
  bool created_ = false;
  veth_signal::LiveNet* live_ = nullptr;
};

}  // namespace netprism::test
