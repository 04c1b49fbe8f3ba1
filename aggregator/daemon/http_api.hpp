// The aggregator's HTTP endpoint (contracts.md, "HTTP"): `GET /metrics` (Prometheus text, no auth) and the
// read-only JSON API `GET /api/v1/status|jobs|report|job/ID|timeline/ID|diagnose/ID`, whose bodies are
// exactly the CLI's `--json` documents (the query server builds both). With a token file, /api/v1 requires
// `Authorization: Bearer TOKEN` (401 otherwise). Raw data (flows, dump) needs the ZeroMQ query socket's admin
// role and is not served here at all.
#pragma once

#include <memory>
#include <stop_token>
#include <string>

#include "live_analysis.hpp"
#include "query_server.hpp"
#include "settings.hpp"

namespace netprism::daemon {

// "ADDR:PORT", "[V6ADDR]:PORT" or ":PORT" (all addresses) -> host and port; false when malformed.
bool parse_http_listen(const std::string& spec, std::string& host, int& port);

class HttpApi {
 public:
  // Reads the token file and binds s.http_listen; throws std::runtime_error with a one-line reason.
  HttpApi(const Settings& s, QueryServer& query, LiveAnalysis& live);
  ~HttpApi();
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;
  void run(std::stop_token stop);  // serves until stop is requested

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace netprism::daemon
