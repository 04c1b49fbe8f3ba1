// The wire decoder (every message type: HELLO, BATCH, ACK, HEARTBEAT) on untrusted bytes; what decodes must
// encode and decode again.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "netprism/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace netprism;
  wire::DecodeLimits limits;
  limits.max_message_bytes = 1 << 20;
  auto d = wire::decode(std::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (!d) return 0;
  std::string again = std::visit([](const auto& m) { return wire::encode(m); }, d.message->body);
  if (!wire::decode(again, limits)) std::abort();  // what we accepted we must be able to re-read
  return 0;
}
