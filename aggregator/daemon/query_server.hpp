// The query endpoint: ZeroMQ REP, one JSON request -> one JSON reply.
// Request: {"cmd": "status"|"flows"|"jobs"|"job"|"timeline"|"diagnose"|"perfetto"|"dump", ...arguments}.
// Reply:   {"ok": true, "result": {...}} or {"ok": false, "error": "one line", "not_found": bool,
//          "forbidden": bool (the client's key lacks the role the command needs, daemon/auth.hpp)}.
// A bad request gets an error reply, never silence, so a client never waits for its timeout.
#pragma once

#include <mutex>
#include <stop_token>

#include <zmq.hpp>

#include "auth.hpp"
#include "live_analysis.hpp"
#include "registry.hpp"
#include "settings.hpp"
#include "tenants.hpp"

namespace netprism::daemon {

class QueryServer {
 public:
  QueryServer(zmq::context_t& ctx, const Settings& s, Registry& reg, LiveAnalysis& live,
              store::OwnTraffic own, const Auth* auth = nullptr);
  void run(std::stop_token stop);
  nlohmann::json handle(const nlohmann::json& req);  // exposed for in-process use
  nlohmann::json dump(const nlohmann::json& req);    // one page of `dump`
  // One request -> its reply document (the envelope above); safe to call from other threads (the HTTP API).
  nlohmann::json answer(const nlohmann::json& req);

 private:
  const Settings& s_;
  Registry& reg_;
  LiveAnalysis& live_;
  store::OwnTraffic own_;
  std::mutex mu_;  // answer(): the ZeroMQ and HTTP threads share reader_
  std::unique_ptr<store::Store> reader_;
  std::unique_ptr<Tenants> tenants_;  // with --tenants: "tenant"/"job_name" in jobs and report entries
  zmq::socket_t rep_;
  bool authenticated_ = false;  // CURVE + ZAP: each request carries its key's role
  const Auth* auth_ = nullptr;
};

}  // namespace netprism::daemon
