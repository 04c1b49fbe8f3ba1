#include "netprism/addr.hpp"

#include <arpa/inet.h>

#include <cstring>

namespace netprism {

bool is_v4_mapped(const uint8_t a[16]) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(a, kPrefix, sizeof kPrefix) == 0;
}

std::string format_addr(const uint8_t a[16]) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (is_v4_mapped(a)) {
    inet_ntop(AF_INET, a + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, a, buf, sizeof buf);  // glibc prints the RFC 5952 canonical form
  }
  return buf;
}

std::optional<Addr16> parse_addr(const std::string& text) {
  Addr16 out{};
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    out[10] = out[11] = 0xff;
    std::memcpy(out.data() + 12, &v4, 4);
    return out;
  }
  if (inet_pton(AF_INET6, text.c_str(), out.data()) == 1) return out;
  return std::nullopt;
}

}  // namespace netprism
