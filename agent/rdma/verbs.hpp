// RDMA devices and ports through libibverbs (ibv_get_device_list, ibv_query_port, ibv_query_gid): their
// state and GIDs go into HELLO as interfaces named "rdma:<device>/<port>", so the aggregator can map RoCE
// addresses (RoCEv2 GIDs carry the IP address) to this node.
#pragma once

#include <string>
#include <vector>

#include "netprism/records.hpp"

namespace netprism::agent {

struct RdmaPortInfo {
  std::string device;
  uint32_t port = 0;
  std::string state;       // ACTIVE, DOWN, ...
  std::string link_layer;  // Ethernet (RoCE) or InfiniBand
  std::vector<std::string> gids;
};

// Every port of every device libibverbs sees; empty when there are none (this is not an error).
std::vector<RdmaPortInfo> enumerate_rdma_ports(std::string& err);
std::vector<InterfaceInfo> rdma_interfaces(const std::vector<RdmaPortInfo>& ports);

}  // namespace netprism::agent
