// Who may talk to the aggregator (issue 18): both sockets are CURVE servers, and a ZAP handler (a thread
// serving inproc://zeromq.zap.01, ZeroMQ's fixed address for it) decides each connection by the client's
// public key. Ingest: the key must be in the --agents allowlist, and its line names the one node it may
// write for -- the handler returns that node as the connection's User-Id, which ingest compares with the
// node named in every HELLO, batch and heartbeat. Query: the key must be in --clients with a role, `read`
// (analysis results) or `admin` (also raw traffic: flows, dump). Unknown keys are denied during the
// handshake, before any message is received, so they cost no decode. SIGHUP re-reads both allowlists.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "netprism/keys.hpp"
#include "settings.hpp"

namespace netprism::daemon {

inline constexpr const char* kIngestDomain = "ingest";
inline constexpr const char* kQueryDomain = "query";
// User-Id of the aggregator's own flow collectors (flowin/listener.hpp): they feed ingest over the same
// socket as agents, with a key pair made in memory at every start (never on disk, never in an allowlist), and
// may write only for exporter nodes ("ipfix:ADDR", "sflow:ADDR": collector_node()).
inline constexpr const char* kCollectorUser = "*collectors*";
bool collector_node(const std::string& node);

// A query whose command needs a role the client's key does not have.
struct Forbidden : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Auth {
 public:
  // With CURVE (not s.insecure): loads the server key and the allowlists, binds the ZAP handler and starts
  // its thread. Throws std::runtime_error with a one-line message when a file is missing or malformed.
  Auth(zmq::context_t& ctx, const Settings& s);
  ~Auth();
  Auth(const Auth&) = delete;
  Auth& operator=(const Auth&) = delete;

  bool enabled() const { return enabled_; }
  // Makes `sock` a CURVE server in `domain` (before it binds); nothing when insecure.
  void secure(zmq::socket_t& sock, const char* domain) const;
  // Re-reads the allowlists; "" or the error (the lists in force stay unchanged then).
  std::string reload();
  std::size_t agents() const;
  std::size_t clients() const;
  uint64_t denied() const { return denied_; }
  // Refuses new ingest connections of the key(s) bound to `node` for `cooldown` (a flooder cut at the
  // transport: peer_cut.hpp). Refusals are counted apart from unknown keys; the key is admitted again
  // afterwards.
  void cut(const std::string& node, std::chrono::seconds cooldown);
  uint64_t cut_refused() const { return cut_refused_; }
  std::size_t cut_active() const;  // nodes refused right now
  // The client side the aggregator's own collectors connect to ingest with (plain when insecure).
  keys::ClientCurve collector_curve() const;

 private:
  void run();
  std::string decide(const std::string& domain, const std::string& key_z85, std::string& user) const;

  const Settings& s_;
  bool enabled_ = false;
  keys::KeyPair server_;
  keys::KeyPair collectors_;  // made in memory at start (collector_curve())
  mutable std::mutex mu_;
  std::map<std::string, std::string> agents_, clients_;  // public key (Z85) -> node / role
  // node -> refused until (cut for flooding)
  std::map<std::string, std::chrono::steady_clock::time_point> cut_until_;
  std::atomic<uint64_t> denied_{0}, cut_refused_{0};
  std::atomic<bool> stop_{false};
  std::unique_ptr<zmq::socket_t> zap_;
  std::thread thread_;
};

// The authorised identity of the connection a message came from (ZAP User-Id): the node (ingest) or the
// role (query); "" on a plain connection.
std::string peer_user(zmq::message_t& msg);

// Throws Forbidden when a query command needs a role `role` does not include (admin includes read).
void check_role(const nlohmann::json& req, const std::string& role);

}  // namespace netprism::daemon
