#include "verbs.hpp"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "netprism/addr.hpp"

namespace netprism::agent {
namespace {
struct DevListFree {
  void operator()(ibv_device** l) const { ibv_free_device_list(l); }
};
struct CtxClose {
  void operator()(ibv_context* c) const { ibv_close_device(c); }
};
}  // namespace

std::vector<RdmaPortInfo> enumerate_rdma_ports(std::string& err) {
  std::vector<RdmaPortInfo> out;
  int n = 0;
  std::unique_ptr<ibv_device*, DevListFree> list(ibv_get_device_list(&n));
  if (!list) {
    // ENOSYS: no kernel support (no ib_uverbs); that is the "no RDMA here" case, not a failure.
    if (errno != ENOSYS) err = std::string("ibv_get_device_list: ") + std::strerror(errno);
    return out;
  }
  for (int i = 0; i < n; ++i) {
    std::string name = ibv_get_device_name(list.get()[i]);
    std::unique_ptr<ibv_context, CtxClose> ctx(ibv_open_device(list.get()[i]));
    if (!ctx) {
      err = "cannot open RDMA device " + name + ": " + std::strerror(errno);
      continue;
    }
    ibv_device_attr dattr{};
    if (ibv_query_device(ctx.get(), &dattr) != 0) continue;
    for (uint8_t p = 1; p <= dattr.phys_port_cnt; ++p) {
      ibv_port_attr pattr{};
      if (ibv_query_port(ctx.get(), p, &pattr) != 0) continue;
      RdmaPortInfo info;
      info.device = name;
      info.port = p;
      info.state = ibv_port_state_str(pattr.state);
      info.link_layer = pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
      for (int g = 0; g < pattr.gid_tbl_len; ++g) {
        ibv_gid gid{};
        if (ibv_query_gid(ctx.get(), p, g, &gid) != 0) continue;
        static const uint8_t zero[16] = {};
        if (std::memcmp(gid.raw, zero, 16) == 0) continue;  // unused table slot
        info.gids.push_back(format_addr(gid.raw));
      }
      out.push_back(std::move(info));
    }
  }
  return out;
}

std::vector<InterfaceInfo> rdma_interfaces(const std::vector<RdmaPortInfo>& ports) {
  std::vector<InterfaceInfo> out;
  for (const auto& p : ports) out.push_back({"rdma:" + p.device + "/" + std::to_string(p.port), 0, p.gids});
  return out;
}

}  // namespace netprism::agent
