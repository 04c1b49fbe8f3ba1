#include "auth.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "log.hpp"

namespace netprism::daemon {

namespace {
// Denied connections are logged at most 5 lines/s: a scanner must not fill the journal.
constexpr int kDenyLogPerSecond = 5;
// Commands that return raw traffic of tenants (per-flow totals, stored batches) need admin; analysis
// results need read. A command not listed needs nothing here (the server answers "unknown command").
const std::map<std::string, std::string>& command_roles() {
  static const std::map<std::string, std::string> roles = {
      {"status", "read"},   {"jobs", "read"},     {"job", "read"},
      {"timeline", "read"}, {"diagnose", "read"}, {"perfetto", "read"},
      {"report", "read"},   {"flows", "admin"},   {"dump", "admin"}};
  return roles;
}

std::map<std::string, std::string> load_list(const std::string& path, bool roles) {
  if (path.empty()) return {};
  auto a = keys::load_allowlist(path, roles);
  if (!a.error.empty()) throw std::runtime_error(a.error);
  return std::move(a.by_key);
}
}  // namespace

Auth::Auth(zmq::context_t& ctx, const Settings& s) : s_(s) {
  if (s.insecure) {
    log_line(
        "WARNING: insecure = true: ingest (" + s.listen + ") and queries (" + s.query +
        ") are plain TCP; anyone who can reach them can write records for any node and read all traffic");
    return;
  }
  if (s.server_key.empty())
    throw std::runtime_error(
        "no --server-key: CURVE needs the aggregator's key (create one with `netprism keygen --out PREFIX`), "
        "or "
        "set insecure = true for plain TCP");
  std::string err;
  auto k = keys::read_secret(s.server_key, err);
  if (!k) throw std::runtime_error(err);
  server_ = *k;
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    throw std::runtime_error("cannot make the collectors' CURVE key pair");
  collectors_ = {pub, sec};
  agents_ = load_list(s.agents, false);
  clients_ = load_list(s.clients, true);
  // Bound before any CURVE socket: libzmq admits every client of a domain no handler answers for.
  zap_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::rep);
  zap_->set(zmq::sockopt::linger, 0);
  zap_->bind("inproc://zeromq.zap.01");
  enabled_ = true;
  thread_ = std::thread([this] { run(); });
  log_line("CURVE on, server key " + server_.public_z85 + ": " + std::to_string(agents_.size()) +
           " agent key(s), " + std::to_string(clients_.size()) + " client key(s)");
}

Auth::~Auth() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Auth::secure(zmq::socket_t& sock, const char* domain) const {
  if (enabled_) keys::apply_server(sock.handle(), server_, domain);
}

std::string Auth::reload() {
  if (!enabled_) return "";
  try {
    auto agents = load_list(s_.agents, false);
    auto clients = load_list(s_.clients, true);
    std::lock_guard lk(mu_);
    agents_ = std::move(agents);
    clients_ = std::move(clients);
  } catch (const std::exception& e) {
    return e.what();
  }
  // Connections already admitted stay up; a removed key is refused from its next connection on.
  return "";
}

std::size_t Auth::agents() const {
  std::lock_guard lk(mu_);
  return agents_.size();
}

std::size_t Auth::clients() const {
  std::lock_guard lk(mu_);
  return clients_.size();
}

void Auth::cut(const std::string& node, std::chrono::seconds cooldown) {
  std::lock_guard lk(mu_);
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(cut_until_, [&](const auto& kv) { return kv.second <= now; });
  cut_until_[node] = now + cooldown;
}

std::size_t Auth::cut_active() const {
  std::lock_guard lk(mu_);
  const auto now = std::chrono::steady_clock::now();
  return static_cast<std::size_t>(
      std::count_if(cut_until_.begin(), cut_until_.end(), [&](const auto& kv) { return kv.second > now; }));
}

bool collector_node(const std::string& node) {
  return node.rfind("ipfix:", 0) == 0 || node.rfind("sflow:", 0) == 0;
}

keys::ClientCurve Auth::collector_curve() const {
  if (!enabled_) return {};
  return {collectors_, server_.public_z85};
}

std::string Auth::decide(const std::string& domain, const std::string& key_z85, std::string& user) const {
  std::lock_guard lk(mu_);
  if (domain == kIngestDomain && key_z85 == collectors_.public_z85) {
    user = kCollectorUser;
    return "";
  }
  const auto& list = domain == kIngestDomain ? agents_ : clients_;
  if (domain != kIngestDomain && domain != kQueryDomain) return "unknown domain";
  auto it = list.find(key_z85);
  if (it == list.end())
    return "key not in the " + std::string(domain == kIngestDomain ? "agents" : "clients") + " allowlist";
  if (domain == kIngestDomain)
    if (auto c = cut_until_.find(it->second); c != cut_until_.end()) {
      const auto left = c->second - std::chrono::steady_clock::now();
      if (left > std::chrono::seconds(0))
        return "cut for flooding (deferred data beyond peer_cut_bytes), " +
               std::to_string(std::chrono::ceil<std::chrono::seconds>(left).count()) + " s left";
    }
  user = it->second;
  return "";
}

void Auth::run() {
  ::pthread_setname_np(::pthread_self(), "np-zap");
  RateLimitedLog deny_log(kDenyLogPerSecond);
  // ZAP (RFC 27): request = version, request id, domain, address, routing id, mechanism, credentials...;
  // reply = version, request id, status code, status text, user id, metadata.
  while (!stop_) {
    zmq::pollitem_t items[] = {{zap_->handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 1, std::chrono::milliseconds(100));
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    std::vector<zmq::message_t> req;
    do {
      req.emplace_back();
      if (!zap_->recv(req.back(), zmq::recv_flags::dontwait)) break;
    } while (zap_->get(zmq::sockopt::rcvmore));
    if (req.size() < 2) continue;
    std::string code = "400", text, user;
    const std::string domain = req.size() > 2 ? req[2].to_string() : "";
    const std::string address = req.size() > 3 ? req[3].to_string() : "?";
    if (req.size() < 7 || req[0].to_string_view() != "1.0" || req[5].to_string_view() != "CURVE" ||
        req[6].size() != 32) {
      text = "not a CURVE request";
    } else {
      char z85[keys::kZ85Len + 1];
      zmq_z85_encode(z85, static_cast<const uint8_t*>(req[6].data()), 32);
      text = decide(domain, z85, user);
      if (text.empty()) {
        code = "200";
        text = "OK";
      } else {
        (text.rfind("cut for", 0) == 0 ? cut_refused_ : denied_)++;
        deny_log.log("refused a " + domain + " connection from " + address + " (key " + z85 + "): " + text);
      }
    }
    zap_->send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
    zap_->send(req[1], zmq::send_flags::sndmore);
    zap_->send(zmq::buffer(code), zmq::send_flags::sndmore);
    zap_->send(zmq::buffer(text), zmq::send_flags::sndmore);
    zap_->send(zmq::buffer(user), zmq::send_flags::sndmore);
    zap_->send(zmq::message_t(), zmq::send_flags::none);
  }
}

std::string peer_user(zmq::message_t& msg) {
  const char* u = zmq_msg_gets(msg.handle(), "User-Id");
  return u ? u : "";
}

void check_role(const nlohmann::json& req, const std::string& role) {
  if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string()) return;
  const std::string cmd = req["cmd"];
  auto it = command_roles().find(cmd);
  if (it == command_roles().end()) return;
  if (it->second == "read" && (role == "read" || role == "admin")) return;
  if (it->second == "admin" && role == "admin") return;
  throw Forbidden("permission denied: '" + cmd + "' needs the " + it->second +
                  " role (this client's key has " +
                  (role.empty() ? std::string("no role") : "the " + role + " role") + ")");
}

}  // namespace netprism::daemon
