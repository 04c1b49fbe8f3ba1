#include "query_server.hpp"

#include <malloc.h>
#include <pthread.h>

#include <chrono>

#include "job_records.hpp"
#include "log.hpp"

namespace netprism::daemon {

namespace {
// Largest request we parse: requests are a command and a few arguments.
constexpr std::size_t kMaxRequestBytes = 64 * 1024;
// Stored (retired) jobs a `jobs` answer lists unless the request asks for another `limit`: months of jobs
// starting and ending all the time are thousands; the newest thousand keep the answer under ~200 KB.
constexpr uint64_t kStoredJobsDefault = 1000;
// Iterations of a stored job one `timeline`/`perfetto` answer holds unless asked otherwise (`from`,
// `limit`; `next_from` in the answer when there are more): 100,000 iterations are ~8 MB of JSON.
constexpr uint64_t kStoredIterationsDefault = 100000;
// A `dump` page carries at most this much stored data, so one reply stays a modest message.
constexpr std::size_t kDumpPageBytes = 8u << 20;
// Store queries waiting for the worker at most; more are answered "busy" at once (the CLI's timeout is
// seconds, and a flows query may take up to query_deadline_ms: a deeper queue would only time out).
constexpr std::size_t kMaxQueuedStoreQueries = 32;

std::string serialise(const nlohmann::json& reply) {
  return reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct NotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

uint64_t u64_arg(const nlohmann::json& req, const char* key, uint64_t def) {
  auto it = req.find(key);
  if (it == req.end() || it->is_null()) return def;
  if (!it->is_number_unsigned())
    throw BadRequest(std::string("'") + key + "' must be a non-negative integer");
  return it->get<uint64_t>();
}

std::string base64(std::string_view in) {
  static constexpr char kTab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int k = 3; k >= 0; --k) out += kTab[(v >> (6 * k)) & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= uint8_t(in[i + 1]) << 8;
    out += kTab[(v >> 18) & 63];
    out += kTab[(v >> 12) & 63];
    out += i + 1 < in.size() ? kTab[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}
// The allocator's view of the process (glibc mallinfo2): what the heap holds in use, what it keeps free
// (freed but not returned: RSS that no data needs), and the large blocks mapped apart. RSS alone cannot
// tell a growing live view from a heap that kept the peak of a transient rebuild.
nlohmann::json heap_memory() {
  const struct mallinfo2 m = mallinfo2();
  constexpr double kMiB = 1024.0 * 1024.0;
  return {{"heap_in_use_mb", static_cast<double>(m.uordblks) / kMiB},
          {"heap_free_mb", static_cast<double>(m.fordblks) / kMiB},
          {"mmapped_mb", static_cast<double>(m.hblkhd) / kMiB}};
}
}  // namespace

QueryServer::QueryServer(zmq::context_t& ctx, const Settings& s, Registry& reg, LiveAnalysis& live,
                         store::OwnTraffic own, const Auth* auth)
    : s_(s), reg_(reg), live_(live), own_(std::move(own)), router_(ctx, zmq::socket_type::router) {
  if (auth) auth->secure(router_, kQueryDomain);
  authenticated_ = auth && auth->enabled();
  auth_ = auth;
  router_.set(zmq::sockopt::linger, 0);
  router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxRequestBytes));
  // A ROUTER never blocks on a send: a reply to a vanished client, or beyond its queue, is dropped.
  router_.bind(s.query);
  if (!s.tenants_file.empty()) tenants_ = std::make_unique<Tenants>(s.tenants_file);
  worker_ = std::jthread([this](std::stop_token st) { work(st); });
}

QueryServer::~QueryServer() {
  worker_.request_stop();
  jobs_cv_.notify_all();
}

// `dump`: a page of raw stored batches, plus the registrations on the first page (`netprism record`).
nlohmann::json QueryServer::dump(const nlohmann::json& req) {
  int64_t after = static_cast<int64_t>(u64_arg(req, "after_id", 0));
  auto rows = reader_->raw_batches(after, u64_arg(req, "since", 0), u64_arg(req, "until", UINT64_MAX),
                                   kDumpPageBytes);
  auto out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"id", r.id},
                   {"node", r.node},
                   {"epoch", r.epoch},
                   {"seq", r.seq},
                   {"received_ns", r.received_ns},
                   {"first_ns", r.first_ns},
                   {"last_ns", r.last_ns},
                   {"records", r.records},
                   {"raw_bytes", r.raw_bytes},
                   {"data", base64(r.data)}});
  nlohmann::json res = {{"batches", out}, {"done", rows.empty()}};
  if (after == 0) {
    auto nodes = nlohmann::json::array();
    for (const auto& n : reader_->nodes()) {
      nlohmann::json ifs = nlohmann::json::array();
      for (const auto& i : n.hello.interfaces)
        ifs.push_back({{"name", i.name}, {"ifindex", i.ifindex}, {"addrs", i.addrs}});
      nodes.push_back({{"node", n.node},
                       {"epoch", n.epoch},
                       {"agent_version", n.hello.agent_version},
                       {"interfaces", ifs},
                       {"registered_ns", n.registered_ns},
                       {"last_seen_ns", n.last_seen_ns},
                       {"records", n.records}});
    }
    res["nodes"] = nodes;
    res["own_ports"] = own_.ports;
  }
  return res;
}

nlohmann::json QueryServer::handle(const nlohmann::json& req) {
  if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string())
    throw BadRequest("request must be a JSON object with a string 'cmd'");
  const std::string cmd = req["cmd"];
  if (reads_store(req) && !reader_)
    reader_ = std::make_unique<store::Store>(s_.data_dir, store::Db::Mode::kReadOnly);
  const uint64_t now = now_unix_ns();

  if (cmd == "status") {
    auto st = reg_.status(now, static_cast<uint64_t>(s_.connected_timeout_s) * 1000000000ull);
    auto snap = live_.latest();
    st["analysis"] = {{"last_run_ns", snap->computed_ns},  {"took_ms", snap->took_ns / 1e6},
                      {"window_events", snap->events},     {"jobs", snap->jobs.size()},
                      {"dropped_events", live_.dropped()}, {"deferred_jobs", live_.deferred()}};
    const auto d = live_.dropped_by_cause();  // dropped_events is their sum
    st["analysis"]["dropped_by_cause"] = {{"queue_full", d.queue_full},
                                          {"conn_table_full", d.conn_table_full},
                                          {"xfer_bound", d.xfer_bound},
                                          {"undecodable", d.undecodable}};
    const auto w = live_.engine_stats();  // what the live analysis' passes cost, in its own units
    st["analysis"]["work"] = {{"reanalyses", w.analysed},
                              {"reused", w.reused},
                              {"structure_runs", w.structure_runs},
                              {"events", w.events},
                              {"reanalysed_xfers", w.reanalysed_xfers},
                              {"last_pass_xfers", w.tail_xfers},
                              {"conns", w.conns},
                              {"flows", w.flows},
                              {"xfers", w.xfers},
                              {"xfer_slots", w.xfer_slots},
                              {"iterations", w.iterations},
                              {"phases", w.phases}};
    st["memory"] = heap_memory();
    st["connected_timeout_s"] = s_.connected_timeout_s;
    if (authenticated_)  // connections the ZAP handler refused (unknown keys), and the allowlists' sizes
      st["auth"] = {{"agent_keys", auth_->agents()},
                    {"client_keys", auth_->clients()},
                    {"denied_connections", auth_->denied()},
                    {"cut_refused_connections", auth_->cut_refused()},
                    {"cut_active", auth_->cut_active()}};
    return st;
  }
  if (cmd == "flows") {
    store::FlowQuery q;
    if (auto it = req.find("node"); it != req.end() && !it->is_null()) {
      if (!it->is_string()) throw BadRequest("'node' must be a string");
      q.node = it->get<std::string>();
    }
    q.since = u64_arg(req, "since", 0);
    q.until = u64_arg(req, "until", UINT64_MAX);
    q.limit = u64_arg(req, "limit", 0);
    q.max_rows = static_cast<std::size_t>(s_.query_max_rows);
    if (s_.query_deadline_ms > 0)
      q.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(s_.query_deadline_ms);
    try {
      return store::query_flows(*reader_, q, own_);
    } catch (const store::QueryDeadline& e) {
      throw BadRequest(e.what());
    }
  }
  auto snap = live_.latest();
  if (cmd == "jobs") {  // the live view, then stored (retired) jobs most recently active first, bounded
    std::unique_lock<std::mutex> lk(history_mu_);
    auto doc = jobs_document(snap->jobs, history_reader(), u64_arg(req, "limit", kStoredJobsDefault));
    lk.unlock();
    doc["analysed_ns"] = snap->computed_ns;
    if (tenants_) tenants_->annotate(doc, "jobs");
    return doc;
  }
  if (cmd == "report") {  // the fleet view (`netprism report`), computed here so only the summary travels
    auto r = analysis::fleet_report(snap->jobs, now);
    r["analysed_ns"] = snap->computed_ns;
    if (tenants_) tenants_->annotate(r, "jobs");
    return r;
  }
  if (cmd == "job" || cmd == "timeline" || cmd == "diagnose" || cmd == "perfetto") {
    if (!req.contains("id") || !req["id"].is_string()) throw BadRequest("'id' must be a string");
    const std::string id = req["id"];
    const auto* j = snap->find(id);
    if (!j) {  // retired (or not analysed again since a restart): from the store, a page of iterations
      std::lock_guard<std::mutex> lk(history_mu_);
      auto doc =
          stored_job_document(history_reader(), cmd, id, static_cast<int64_t>(u64_arg(req, "from", 0)) - 1,
                              u64_arg(req, "limit", kStoredIterationsDefault));
      if (!doc) throw NotFound("no job '" + id + "' (see `netprism jobs`)");
      return *doc;
    }
    if (cmd == "job") return analysis::job_detail(*j);
    if (cmd == "timeline") return analysis::timeline(*j);
    if (cmd == "diagnose") return analysis::diagnosis(*j);
    return analysis::perfetto(*j);
  }
  if (cmd == "dump") return dump(req);
  throw BadRequest("unknown command '" + cmd + "'");
}

store::Store& QueryServer::history_reader() {
  if (!history_reader_)
    history_reader_ = std::make_unique<store::Store>(s_.data_dir, store::Db::Mode::kReadOnly);
  return *history_reader_;
}

bool QueryServer::reads_store(const nlohmann::json& req) {
  if (!req.is_object()) return false;
  auto it = req.find("cmd");
  return it != req.end() && it->is_string() && (*it == "flows" || *it == "dump");
}

nlohmann::json QueryServer::answer(const nlohmann::json& req) {
  std::unique_lock<std::mutex> lk(mu_, std::defer_lock);  // reader_ is shared; the rest is thread-safe
  if (reads_store(req)) lk.lock();
  try {
    return {{"ok", true}, {"result", handle(req)}};
  } catch (const NotFound& e) {
    return {{"ok", false}, {"error", e.what()}, {"not_found", true}};
  } catch (const BadRequest& e) {
    return {{"ok", false}, {"error", e.what()}, {"bad_request", true}};
  } catch (const std::exception& e) {
    log_line(std::string("query failed: ") + e.what());
    return {{"ok", false}, {"error", std::string("aggregator error: ") + e.what()}};
  }
}

void QueryServer::run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_.fd(), ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, std::chrono::milliseconds(100));
    if (items[1].revents & ZMQ_POLLIN) {
      wake_.clear();
      send_done();
    }
    if (items[0].revents & ZMQ_POLLIN) on_request();
  }
}

// One request: [identity][empty delimiter (REQ)][JSON, possibly in several frames]. Answered here, or
// handed to the worker when it reads the store.
void QueryServer::on_request() {
  std::vector<zmq::message_t> envelope(1);
  if (!router_.recv(envelope[0], zmq::recv_flags::dontwait)) return;
  std::string text, role;
  bool body = false;
  while (router_.get(zmq::sockopt::rcvmore)) {
    zmq::message_t part;
    (void)router_.recv(part, zmq::recv_flags::none);
    if (!body && part.size() == 0 && router_.get(zmq::sockopt::rcvmore)) {
      envelope.push_back(std::move(part));  // the delimiter, returned with the reply
      continue;
    }
    if (!body && authenticated_) role = peer_user(part);
    body = true;
    if (text.size() < kMaxRequestBytes) text += part.to_string_view();
  }
  auto req = nlohmann::json::parse(text, nullptr, false);
  if (req.is_discarded())
    return reply(envelope,
                 serialise({{"ok", false}, {"error", "request is not valid JSON"}, {"bad_request", true}}));
  try {
    if (authenticated_) check_role(req, role);
  } catch (const Forbidden& e) {
    return reply(envelope, serialise({{"ok", false}, {"error", e.what()}, {"forbidden", true}}));
  }
  if (!reads_store(req)) return reply(envelope, serialise(answer(req)));
  std::lock_guard lk(jobs_mu_);
  if (todo_.size() >= kMaxQueuedStoreQueries)
    return reply(envelope, serialise({{"ok", false},
                                      {"error", "busy: " + std::to_string(todo_.size()) +
                                                    " flows/dump queries queued; retry later"}}));
  todo_.push_back({std::move(envelope), std::move(req), ""});
  jobs_cv_.notify_one();
}

void QueryServer::reply(std::vector<zmq::message_t>& envelope, const std::string& body) {
  for (auto& f : envelope)
    if (!router_.send(f, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
  (void)router_.send(zmq::buffer(body), zmq::send_flags::dontwait);
}

// The worker: store queries one at a time (they share the reader and its lock), replies back to run().
void QueryServer::work(std::stop_token stop) {
  ::pthread_setname_np(::pthread_self(), "np-query-store");
  for (;;) {
    Job job;
    {
      std::unique_lock lk(jobs_mu_);
      // Timed: a stop requested between the check and the wait would otherwise go unnoticed.
      jobs_cv_.wait_for(lk, std::chrono::milliseconds(100),
                        [&] { return stop.stop_requested() || !todo_.empty(); });
      if (stop.stop_requested()) return;
      if (todo_.empty()) continue;
      job = std::move(todo_.front());
      todo_.pop_front();
    }
    job.reply = serialise(answer(job.req));
    {
      std::lock_guard lk(jobs_mu_);
      done_.push_back(std::move(job));
    }
    wake_.signal();
  }
}

void QueryServer::send_done() {
  std::deque<Job> done;
  {
    std::lock_guard lk(jobs_mu_);
    done.swap(done_);
  }
  for (auto& j : done) reply(j.envelope, j.reply);
}

}  // namespace netprism::daemon
