// The query endpoint: ZeroMQ REP, one JSON request -> one JSON reply.
// Request: {"cmd": "status"|"flows"|"jobs"|"job"|"timeline"|"diagnose"|"perfetto"|"dump", ...arguments}.
// Reply:   {"ok": true, "result": {...}} or {"ok": false, "error": "one line", "not_found": bool,
//          "forbidden": bool (the client's key lacks the role the command needs, daemon/auth.hpp)}.
// A bad request gets an error reply, never silence, so a client never waits for its timeout.
#pragma once

#include <stop_token>

#include <zmq.hpp>

#include "auth.hpp"
#include "live_analysis.hpp"
#include "registry.hpp"
#include "settings.hpp"

namespace netprism::daemon {

class QueryServer {
 public:
  QueryServer(zmq::context_t& ctx, const Settings& s, Registry& reg, LiveAnalysis& live,
              store::OwnTraffic own, const Auth* auth = nullptr);
  void run(std::stop_token stop);
  nlohmann::json handle(const nlohmann::json& req);  // exposed for in-process use

 private:
  const Settings& s_;
  Registry& reg_;
  LiveAnalysis& live_;
  store::OwnTraffic own_;
  std::unique_ptr<store::Store> reader_;
  zmq::socket_t rep_;
  bool authenticated_ = false;  // CURVE + ZAP: each request carries its key's role
  const Auth* auth_ = nullptr;
};

}  // namespace netprism::daemon
