#include "check.hpp"

#include <linux/capability.h>
#include <net/if.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>

#include "netinfo.hpp"

namespace netprism::agent {

bool have_capability(int cap) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[cap / 32].effective >> (cap % 32)) & 1u;
}

std::vector<std::string> check_environment(const CheckInput& in) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!std::filesystem::exists(in.btf_path, ec))
    out.push_back("kernel BTF not found at " + in.btf_path +
                  ": boot a kernel built with CONFIG_DEBUG_INFO_BTF=y (the probe is CO-RE and needs it)");
  // CAP_BPF and CAP_PERFMON exist since Linux 5.8; before that (or instead) CAP_SYS_ADMIN covers both.
  bool sys_admin = have_capability(CAP_SYS_ADMIN);
  if (!have_capability(CAP_BPF) && !sys_admin)
    out.push_back(
        "missing capability CAP_BPF (to load the probe): run as root or grant it, e.g. "
        "AmbientCapabilities=CAP_BPF CAP_NET_ADMIN CAP_PERFMON in the systemd unit");
  if (!have_capability(CAP_PERFMON) && !sys_admin)
    out.push_back(
        "missing capability CAP_PERFMON (for the probe's packet access and ring buffer): run as root "
        "or grant it, e.g. AmbientCapabilities=CAP_BPF CAP_NET_ADMIN CAP_PERFMON");
  if (!have_capability(CAP_NET_ADMIN))
    out.push_back(
        "missing capability CAP_NET_ADMIN (to attach tc/XDP programs): run as root or grant it, e.g. "
        "AmbientCapabilities=CAP_BPF CAP_NET_ADMIN CAP_PERFMON");
  if (in.ifaces.empty())
    out.push_back(
        "no interface to watch: pass --iface IF (repeat for several NICs) or set iface in the config");
  for (const auto& i : in.ifaces) {
    if (i.size() >= IF_NAMESIZE || if_nametoindex(i.c_str()) == 0)
      out.push_back("interface " + i +
                    " does not exist in this network namespace: check `ip link` (or run the "
                    "agent in the namespace that owns it)");
  }
  if (!in.spool_dir.empty()) {
    std::filesystem::path p = in.spool_dir;
    while (!p.empty() && !std::filesystem::exists(p, ec)) p = p.parent_path();
    if (p.empty() || ::access(p.c_str(), W_OK) != 0)
      out.push_back("spool directory " + in.spool_dir +
                    " cannot be created or written: create it (mkdir -p) "
                    "with write access for the agent, or pass --spool-dir");
  }
  if (!in.aggregator.empty()) {
    std::vector<EndpointAddr> addrs;
    std::string err;
    if (!resolve_endpoint(in.aggregator, addrs, err))
      out.push_back(err + ": pass --aggregator tcp://HOST:PORT (or set aggregator in the config)");
  }
  return out;
}

}  // namespace netprism::agent
