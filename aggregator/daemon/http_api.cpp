#include "http_api.hpp"

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <httplib.h>

#include "log.hpp"
#include "metrics.hpp"

namespace netprism::daemon {

namespace {
using nlohmann::json;

// A slow or stalled client gives up its connection after this; requests are a line and a few headers.
constexpr int kReadTimeoutS = 5;
// Largest request body accepted: the API takes none (GET only).
constexpr std::size_t kMaxBodyBytes = 64 * 1024;

std::string read_token(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read --http-token file " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string t = ss.str();
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.erase(t.begin());
  if (t.empty()) throw std::runtime_error("--http-token file " + path + " is empty");
  return t;
}

// Compares without an early exit, so response time says nothing about how much of a guess was right.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % b.size()]);
  return diff == 0;
}

void send_json(httplib::Response& res, int status, const json& doc) {
  res.status = status;
  res.set_content(doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", "application/json");
}
}  // namespace

bool parse_http_listen(const std::string& spec, std::string& host, int& port) {
  auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon + 1 >= spec.size()) return false;
  host = spec.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  const std::string p = spec.substr(colon + 1);
  if (p.find_first_not_of("0123456789") != std::string::npos || p.size() > 5) return false;
  port = std::stoi(p);
  return port > 0 && port < 65536;
}

struct HttpApi::Impl {
  QueryServer& query;
  LiveAnalysis& live;
  std::string token;  // empty: no authentication
  httplib::Server svr;
  std::atomic<bool> finished{false};

  Impl(QueryServer& q, LiveAnalysis& l) : query(q), live(l) {}

  bool authorized(const httplib::Request& req) const {
    if (token.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    return h.size() > kBearer.size() && h.compare(0, kBearer.size(), kBearer) == 0 &&
           same_secret(h.substr(kBearer.size()), token);
  }

  // One CLI document: the query server's reply, its result as the body; errors as {"error": ...}.
  void document(const httplib::Request& req, httplib::Response& res, json request) {
    if (!authorized(req)) {
      res.set_header("WWW-Authenticate", "Bearer realm=\"netprism\"");
      send_json(res, 401, {{"error", "missing or wrong bearer token"}});
      return;
    }
    auto reply = query.answer(request);
    if (reply.value("ok", false)) return send_json(res, 200, reply["result"]);
    const int status = reply.value("not_found", false) ? 404 : reply.value("bad_request", false) ? 400 : 500;
    send_json(res, status, {{"error", reply.value("error", "")}});
  }

  void metrics(httplib::Response& res) {
    auto status = query.answer({{"cmd", "status"}});
    auto report = query.answer({{"cmd", "report"}});
    if (!status.value("ok", false) || !report.value("ok", false)) {
      res.status = 500;
      res.set_content("netprism: cannot build the status/report documents\n", "text/plain");
      return;
    }
    auto snap = live.latest();
    res.set_content(render_metrics(status["result"], report["result"], snap->jobs),
                    "text/plain; version=0.0.4; charset=utf-8");
  }

  void routes() {
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { metrics(res); });
    for (const char* cmd : {"status", "jobs", "report"})
      svr.Get(std::string("/api/v1/") + cmd,
              [this, cmd](const httplib::Request& req, httplib::Response& res) {
                document(req, res, {{"cmd", cmd}});
              });
    svr.Get(R"(/api/v1/(job|timeline|diagnose)/([^/]+))",
            [this](const httplib::Request& req, httplib::Response& res) {
              document(req, res, {{"cmd", req.matches[1].str()}, {"id", req.matches[2].str()}});
            });
    svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty())
        send_json(res, res.status, {{"error", "no such resource (see GET /api/v1/jobs, /metrics)"}});
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      log_at(Level::kError, "http: request failed: " + what);
      send_json(res, 500, {{"error", "aggregator error: " + what}});
    });
  }
};

HttpApi::HttpApi(const Settings& s, QueryServer& query, LiveAnalysis& live)
    : impl_(std::make_unique<Impl>(query, live)) {
  std::string host;
  int port = 0;
  if (!parse_http_listen(s.http_listen, host, port))
    throw std::runtime_error("--http must be ADDR:PORT (e.g. 127.0.0.1:7472), got '" + s.http_listen + "'");
  if (!s.http_token_file.empty()) impl_->token = read_token(s.http_token_file);
  impl_->svr.set_read_timeout(kReadTimeoutS, 0);
  impl_->svr.set_write_timeout(kReadTimeoutS, 0);
  impl_->svr.set_payload_max_length(kMaxBodyBytes);
  impl_->routes();
  if (!impl_->svr.bind_to_port(host, port))
    throw std::runtime_error("cannot bind the HTTP endpoint " + s.http_listen + ": " + std::strerror(errno));
}

HttpApi::~HttpApi() = default;

void HttpApi::run(std::stop_token stop) {
  // httplib's stop() only acts once the accept loop runs: wait for that (or for the loop to have ended).
  std::stop_callback on_stop(stop, [this] {
    while (!impl_->svr.is_running() && !impl_->finished)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    impl_->svr.stop();
  });
  if (!impl_->svr.listen_after_bind()) log_line("http: the HTTP endpoint stopped serving");
  impl_->finished = true;
}

}  // namespace netprism::daemon
