// The query endpoint: a ZeroMQ ROUTER answering REQ clients, one JSON request -> one JSON reply. Commands
// that read the store (flows, dump: raw traffic, possibly large and slow) run on a worker thread and are
// answered when done; the others (status and the analysis' documents, from memory) are answered at once, so
// a slow or huge query never holds up another client (issue 18). Role checks come first, for both.
// Request: {"cmd": "status"|"flows"|"jobs"|"job"|"timeline"|"diagnose"|"perfetto"|"dump", ...arguments}.
// Reply:   {"ok": true, "result": {...}} or {"ok": false, "error": "one line", "not_found": bool,
//          "forbidden": bool (the client's key lacks the role the command needs, daemon/auth.hpp)}.
// A bad request gets an error reply, never silence, so a client never waits for its timeout.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <stop_token>
#include <thread>

#include <zmq.hpp>

#include "auth.hpp"
#include "event_fd.hpp"
#include "live_analysis.hpp"
#include "registry.hpp"
#include "settings.hpp"
#include "tenants.hpp"

namespace netprism::daemon {

class QueryServer {
 public:
  QueryServer(zmq::context_t& ctx, const Settings& s, Registry& reg, LiveAnalysis& live,
              store::OwnTraffic own, const Auth* auth = nullptr);
  ~QueryServer();
  void run(std::stop_token stop);
  nlohmann::json handle(const nlohmann::json& req);  // exposed for in-process use
  nlohmann::json dump(const nlohmann::json& req);    // one page of `dump`
  // One request -> its reply document (the envelope above); safe to call from other threads (the HTTP API).
  // Store commands take the reader's lock; the others do not wait for them.
  nlohmann::json answer(const nlohmann::json& req);
  static bool reads_store(const nlohmann::json& req);    // flows, dump: the worker's
  static bool reads_history(const nlohmann::json& req);  // jobs, job ...: history_reader_

 private:
  // A request on its way to the worker and back: the client's envelope (identity, delimiter frames) and
  // the request, then the serialised reply.
  struct Job {
    std::vector<zmq::message_t> envelope;
    nlohmann::json req;
    std::string reply;
  };
  void on_request();
  void reply(std::vector<zmq::message_t>& envelope, const std::string& body);
  void work(std::stop_token stop);
  void send_done();

  const Settings& s_;
  Registry& reg_;
  LiveAnalysis& live_;
  store::OwnTraffic own_;
  std::mutex mu_;  // answer(): the store worker and the HTTP thread share reader_ (flows, dump)
  std::unique_ptr<store::Store> reader_;
  // Job history (jobs, a retired job) is read by the socket's and the HTTP threads: a reader of its own, so
  // such a bounded read never waits behind a long flows/dump on the worker.
  std::mutex history_mu_;
  std::unique_ptr<store::Store> history_reader_;
  std::unique_ptr<Tenants> tenants_;  // with --tenants: "tenant"/"job_name" in jobs and report entries
  zmq::socket_t router_;
  bool authenticated_ = false;  // CURVE + ZAP: each request carries its key's role
  const Auth* auth_ = nullptr;

  // Worker hand-over: jobs in (bounded), replies out (wake_ tells the socket's thread).
  std::mutex jobs_mu_;
  std::condition_variable jobs_cv_;
  std::deque<Job> todo_, done_;
  EventFd wake_;
  std::jthread worker_;  // last: started once everything above exists
};

}  // namespace netprism::daemon
