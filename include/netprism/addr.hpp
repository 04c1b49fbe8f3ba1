// Address text forms users see: dotted quad for IPv4 (never v4-mapped), RFC 5952 for IPv6.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace netprism {

using Addr16 = std::array<uint8_t, 16>;

bool is_v4_mapped(const uint8_t a[16]);
std::string format_addr(const uint8_t a[16]);
// Accepts IPv4 or IPv6 text; IPv4 comes back v4-mapped, as the probe stores it.
std::optional<Addr16> parse_addr(const std::string& text);

}  // namespace netprism
