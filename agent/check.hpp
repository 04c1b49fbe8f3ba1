// The start-up environment check, in the style of xdp-tools' check_bpf_environ(): each missing piece is one
// line naming what is missing and how to fix it. Run before every start and alone with --check.
#pragma once

#include <string>
#include <vector>

namespace netprism::agent {

struct CheckInput {
  std::vector<std::string> ifaces;
  std::string btf_path = "/sys/kernel/btf/vmlinux";
  std::string spool_dir;
  std::string aggregator;  // checked for form and name resolution when set
};

// One line per problem; empty when the agent can run.
std::vector<std::string> check_environment(const CheckInput& in);

// Capability test used above (exposed for tests): true when the effective set holds cap.
bool have_capability(int cap);

}  // namespace netprism::agent
