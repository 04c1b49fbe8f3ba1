// The CLI's side of the query endpoint: one REQ socket per call, finite linger, send and receive timeouts,
// so an unreachable aggregator is reported (exit 1) within the timeout instead of hanging.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "netprism/keys.hpp"

namespace netprism::cli {

struct CallError {
  enum Kind { kUnreachable, kNotFound, kBadEndpoint, kOther } kind;
  std::string message;
};

// How the client authenticates: CURVE keys, or plain TCP (--insecure). `error` set: the keys could not be
// loaded, and every call fails with it (commands that need no aggregator never look).
struct ClientSecurity {
  keys::ClientCurve curve;
  std::string error;
};

class Client {
 public:
  Client(std::string endpoint, std::chrono::milliseconds timeout, ClientSecurity security = {})
      : endpoint_(std::move(endpoint)), timeout_(timeout), security_(std::move(security)) {}
  // The reply's "result", or an error.
  std::optional<nlohmann::json> call(const nlohmann::json& request, CallError& err) const;
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string endpoint_;
  std::chrono::milliseconds timeout_;
  ClientSecurity security_;
};

}  // namespace netprism::cli
