// The agent removes a clsact qdisc it added only when nothing else is attached under it.
#include "tc_qdisc.hpp"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "support/privileged.hpp"

using namespace netprism::agent;

namespace {
int sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

// A veth interface in a network namespace of its own, removed with the namespace.
struct DummyNs {
  DummyNs() : ns("npq" + std::to_string(getpid())) {
    ok = sh("ip netns add " + ns) == 0 &&
         sh("ip -n " + ns + " link add npdum0 type veth peer name npdum1") == 0 &&
         sh("ip -n " + ns + " link set npdum0 up") == 0;
  }
  ~DummyNs() { sh("ip netns del " + ns); }
  std::string ns;
  bool ok = false;
};
}  // namespace

TEST(TcQdisc, RemovesOnlyAnUnusedClsactAndOnlyNamedStaleFilters) {
  NP_REQUIRE_ROOT();
  DummyNs d;
  ASSERT_TRUE(d.ok);
  // rtnetlink talks to the namespace the thread is in: run the checks in a child inside the namespace.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = open(("/run/netns/" + d.ns).c_str(), O_RDONLY);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(10);
    int ifindex = static_cast<int>(if_nametoindex("npdum0"));
    std::string err;
    if (has_clsact(ifindex, err) != std::optional<bool>(false)) _exit(11);
    if (sh("tc qdisc add dev npdum0 clsact") != 0) _exit(12);
    if (has_clsact(ifindex, err) != std::optional<bool>(true)) _exit(13);
    // Someone else's filter: the baseline BPF program, attached by tc itself.
    if (sh(std::string("tc filter add dev npdum0 ingress prio 7 bpf obj ") + NP_BASELINE_BPF_OBJ +
           " sec tc da") != 0)
      _exit(14);
    if (clsact_filter_count(ifindex, err).value_or(0) == 0) _exit(15);
    // Stale-filter removal goes by program name: someone else's filter is never touched.
    if (remove_stale_filters(ifindex, "np_tc_ingress", "np_tc_egress", err) != std::optional<std::size_t>(0))
      _exit(30);
    if (clsact_filter_count(ifindex, err).value_or(0) == 0) _exit(31);
    if (remove_clsact_if_unused(ifindex, err)) _exit(16);  // someone's filter lives there: keep it
    if (has_clsact(ifindex, err) != std::optional<bool>(true)) _exit(17);
    // tc names a filter loaded from an object "<file>:[<section>]"; libbpf's attach "<program>:[<id>]".
    if (remove_stale_filters(ifindex, "baseline.bpf.o", "none", err) != std::optional<std::size_t>(1))
      _exit(18);
    if (clsact_filter_count(ifindex, err) != std::optional<std::size_t>(0)) _exit(19);
    if (!remove_clsact_if_unused(ifindex, err)) _exit(20);
    if (has_clsact(ifindex, err) != std::optional<bool>(false)) _exit(21);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "step " << WEXITSTATUS(status) << " failed (see the test source)";
}
