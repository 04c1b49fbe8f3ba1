// What the agent tells the aggregator about its network side, and what it must not observe: interface
// addresses for HELLO, and the aggregator endpoint's addresses and port for the probe's exclusion list (the
// agent's own shipping traffic is not training traffic; contracts: "Traffic between agents and the
// aggregator is excluded").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "netprism/addr.hpp"
#include "netprism/records.hpp"

namespace netprism::agent {

std::vector<InterfaceInfo> interface_info(const std::vector<std::string>& ifaces);

struct EndpointAddr {
  Addr16 addr{};
  uint16_t port = 0;
};

// Resolves a ZeroMQ tcp:// endpoint to its addresses and port. Non-TCP transports (ipc://, inproc://) give an
// empty list and no error. false + reason for a malformed or unresolvable tcp endpoint.
bool resolve_endpoint(const std::string& endpoint, std::vector<EndpointAddr>& out, std::string& err);

}  // namespace netprism::agent
