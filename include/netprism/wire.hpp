// msgpack codec for the agent <-> aggregator messages (records.hpp).
//
// Framing: every ZeroMQ message is one msgpack array [schema_version, type, body]; bodies are positional
// arrays (compact, and extra trailing fields from a newer minor revision are ignored). Decoding treats the
// bytes as hostile: container and string sizes are capped both by fixed limits and by the input length (an
// array of N elements needs at least N bytes), so no allocation is sized by an attacker, and no exception
// leaves decode().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "netprism/records.hpp"

namespace netprism::wire {

struct DecodeLimits {
  std::size_t max_message_bytes = 64u << 20;
  std::size_t max_array = 1u << 20;
  std::size_t max_map = 4096;
  std::size_t max_str = 1u << 16;
  std::size_t max_bin = 1u << 16;
  std::size_t max_depth = 8;
};

using Body = std::variant<Hello, Batch, Ack, Heartbeat>;

struct Message {
  MsgType type;
  Body body;
};

// Either a message or a one-line reason it was rejected (never both).
struct DecodeResult {
  std::optional<Message> message;
  std::string error;
  explicit operator bool() const { return message.has_value(); }
};

std::string encode(const Hello& m);
std::string encode(const Batch& m);
std::string encode(const Ack& m);
std::string encode(const Heartbeat& m);

DecodeResult decode(std::string_view bytes, const DecodeLimits& limits = {});

}  // namespace netprism::wire
