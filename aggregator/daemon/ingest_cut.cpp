// Ingest's side of cutting a flooding key (peer_cut.hpp): every message's connection is noted (its fd and TCP
// 4-tuple, from its first message), every deferral counted; a key found flooding is refused by the ZAP
// handler and its connections are shut.
#include "ingest.hpp"
#include "log.hpp"

namespace netprism::daemon {

// The aggregator's own collectors are never cut (their key is made in memory at start, ACK-clocked too).
bool Ingest::cuttable(const Frame& f) const {
  return authenticated_ && auth_ && !f.peer.empty() && f.peer != kCollectorUser;
}

void Ingest::note_connection(const Frame& f) {
  if (!cuttable(f)) return;
  const std::string conn = f.identity.to_string();
  if (!cut_.seen(conn, f.peer, std::chrono::steady_clock::now())) return;
  // Its fd and 4-tuple, from its first message (the fd is checked against the 4-tuple again when shut).
  const char* ip = zmq_msg_gets(f.payload.handle(), "Peer-Address");
  cut_.remember(conn, {f.fd, tcp_tuple(f.fd, ip ? ip : "")});
}

void Ingest::note_deferred(const Frame& f) {
  if (!cuttable(f)) return;
  const auto cooldown =
      cut_.deferred(f.identity.to_string(), f.peer, f.payload_bytes, std::chrono::steady_clock::now());
  if (cooldown) cut_peer(f.peer, *cooldown);
}

bool Ingest::admitting(const Frame& f, uint64_t seq) {
  if (!cuttable(f)) return true;
  const auto now = std::chrono::steady_clock::now();
  if (cut_.is_cut(f.peer, now)) return false;
  const auto cooldown = cut_.admitting(f.identity.to_string(), f.peer, f.payload_bytes, seq, now);
  if (cooldown) cut_peer(f.peer, *cooldown);
  return !cooldown;
}

void Ingest::cut_peer(const std::string& peer, std::chrono::seconds cooldown) {
  auth_->cut(peer, cooldown);  // refused from its next connection on ...
  uint64_t shut = 0;
  for (const auto& c : cut_.take_connections(peer)) shut += shut_connection(c);  // ... and read no more
  reg_.count_cut(peer, shut);
  log_line("cut '" + peer + "' for " + std::to_string(cooldown.count()) +
           " s: it kept sending without waiting for answers (over peer_cut_bytes unanswered); " +
           std::to_string(shut) + " connection(s) shut, its key refused until then");
}

}  // namespace netprism::daemon
