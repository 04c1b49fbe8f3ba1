#include "netinfo.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>

namespace netprism::agent {

std::vector<InterfaceInfo> interface_info(const std::vector<std::string>& ifaces) {
  std::vector<InterfaceInfo> out;
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) all = nullptr;
  for (const auto& name : ifaces) {
    InterfaceInfo info{name, if_nametoindex(name.c_str()), {}};
    for (ifaddrs* a = all; a; a = a->ifa_next) {
      if (!a->ifa_addr || name != a->ifa_name) continue;
      uint8_t addr[16] = {};
      if (a->ifa_addr->sa_family == AF_INET) {
        addr[10] = addr[11] = 0xff;
        std::memcpy(addr + 12, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
      } else if (a->ifa_addr->sa_family == AF_INET6) {
        std::memcpy(addr, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
      } else {
        continue;
      }
      info.addrs.push_back(format_addr(addr));
    }
    out.push_back(std::move(info));
  }
  if (all) freeifaddrs(all);
  return out;
}

bool resolve_endpoint(const std::string& endpoint, std::vector<EndpointAddr>& out, std::string& err) {
  out.clear();
  const std::string scheme = "tcp://";
  if (endpoint.rfind(scheme, 0) != 0) {
    if (endpoint.find("://") == std::string::npos) {
      err = "aggregator endpoint '" + endpoint + "' has no transport (expected tcp://HOST:PORT)";
      return false;
    }
    return true;
  }
  std::string rest = endpoint.substr(scheme.size());
  if (auto semi = rest.find(';'); semi != std::string::npos) rest = rest.substr(semi + 1);  // "src;dst" form
  auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon + 1 >= rest.size()) {
    err = "aggregator endpoint '" + endpoint + "' has no port (expected tcp://HOST:PORT)";
    return false;
  }
  std::string host = rest.substr(0, colon), port_s = rest.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  uint16_t port = 0;
  auto [p, ec] = std::from_chars(port_s.data(), port_s.data() + port_s.size(), port);
  if (ec != std::errc() || p != port_s.data() + port_s.size() || port == 0) {
    err = "aggregator endpoint '" + endpoint + "' has a bad port '" + port_s + "'";
    return false;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) {
    err = "cannot resolve aggregator host '" + host + "': " + gai_strerror(rc);
    return false;
  }
  for (addrinfo* r = res; r; r = r->ai_next) {
    EndpointAddr e;
    e.port = port;
    if (r->ai_family == AF_INET) {
      e.addr[10] = e.addr[11] = 0xff;
      std::memcpy(e.addr.data() + 12, &reinterpret_cast<sockaddr_in*>(r->ai_addr)->sin_addr, 4);
    } else if (r->ai_family == AF_INET6) {
      std::memcpy(e.addr.data(), &reinterpret_cast<sockaddr_in6*>(r->ai_addr)->sin6_addr, 16);
    } else {
      continue;
    }
    bool dup = false;
    for (const auto& o : out) dup = dup || (o.addr == e.addr);
    if (!dup) out.push_back(e);
  }
  freeaddrinfo(res);
  return true;
}

}  // namespace netprism::agent
