#include "peer_cut.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

namespace netprism::daemon {

namespace {
// Records are swept at most once per period. A connection's record is dropped once it has been quiet for two
// periods: a conforming agent leaves a connection within one ACK timeout of a deferral, so an older record
// only keeps a dead connection's fd around.
constexpr int kQuietPeriods = 2;
// The per-key bound, in connections' worth (see peer_cut.hpp: at most 3 conforming connections fall within
// the two periods it covers).
constexpr uint64_t kKeyConns = 4;
}  // namespace

std::optional<std::chrono::seconds> PeerCut::deferred(const std::string& conn, const std::string& peer,
                                                      std::size_t bytes, Clock::time_point now) {
  // Cut already: what was queued before its connections were shut is deferred without counting again.
  if (p_.conn_bytes == 0 || is_cut(peer, now)) return std::nullopt;
  sweep(now);
  auto& c = conns_[conn];
  c.peer = peer;
  c.bytes += bytes;
  c.last = now;
  auto& k = keys_[peer];
  if (now - k.period_start >= p_.period) {
    // One period later, the current one becomes the previous; more than that, both are over.
    k.prev = now - k.period_start < 2 * p_.period ? k.cur : 0;
    k.cur = 0;
    k.period_start = now;
  }
  k.cur += bytes;
  k.last = now;
  if (c.bytes + c.inflight > p_.conn_bytes || k.cur + k.prev > kKeyConns * p_.conn_bytes) return cut(k, now);
  return std::nullopt;
}

std::optional<std::chrono::seconds> PeerCut::admitting(const std::string& conn, const std::string& peer,
                                                       std::size_t bytes, uint64_t seq,
                                                       Clock::time_point now) {
  if (p_.conn_bytes == 0) return std::nullopt;
  auto& c = conns_[conn];
  c.peer = peer;
  c.last = now;
  if (c.bytes + c.inflight + bytes > p_.conn_bytes) {
    auto& k = keys_[peer];
    k.last = now;
    return cut(k, now);
  }
  c.inflight += bytes;
  inflight_.push_back({seq, conn, bytes});
  return std::nullopt;
}

void PeerCut::answered_upto(uint64_t seq) {
  while (!inflight_.empty() && inflight_.front().seq < seq) {
    // A connection taken by a cut meanwhile has no record any more: nothing to release.
    if (auto it = conns_.find(inflight_.front().conn); it != conns_.end())
      it->second.inflight -= std::min(it->second.inflight, inflight_.front().bytes);
    inflight_.pop_front();
  }
}

std::chrono::seconds PeerCut::cut(Key& k, Clock::time_point now) {
  // A key whose last cool-down ended more than cooldown_max ago starts again from the first one.
  if (k.cuts > 0 && now - k.cut_until > p_.cooldown_max) k.cuts = 0;
  const int doublings = static_cast<int>(std::min<uint64_t>(k.cuts, 16));
  ++k.cuts;
  k.cur = k.prev = 0;  // judged afresh after the cool-down (its connections' records go with the shutting)
  k.period_start = now;
  const auto cooldown = std::min(p_.cooldown_max, p_.cooldown * (int64_t{1} << doublings));
  k.cut_until = now + cooldown;
  return cooldown;
}

bool PeerCut::is_cut(const std::string& peer, Clock::time_point now) const {
  auto it = keys_.find(peer);
  return it != keys_.end() && now < it->second.cut_until;
}

void PeerCut::sweep(Clock::time_point now) {
  if (now < next_sweep_) return;
  next_sweep_ = now + p_.period;
  std::erase_if(conns_, [&](const auto& kv) {
    return kv.second.inflight == 0 && now - kv.second.last > kQuietPeriods * p_.period;
  });
  // Keys that were never cut are forgotten like connections; a cut key is kept for its doubling cool-down,
  // until cooldown_max after its last deferral (keys are bounded by the agents allowlist anyway).
  std::erase_if(keys_, [&](const auto& kv) {
    const auto quiet = now - kv.second.last;
    return kv.second.cuts == 0 ? quiet > kQuietPeriods * p_.period
                               : now - kv.second.cut_until > p_.cooldown_max;
  });
}

std::vector<PeerCut::ConnInfo> PeerCut::take_connections(const std::string& peer) {
  std::vector<ConnInfo> out;
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->second.peer == peer) {
      out.push_back(std::move(it->second.info));
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void PeerCut::remember(const std::string& conn, ConnInfo info) {
  if (auto it = conns_.find(conn); it != conns_.end()) it->second.info = std::move(info);
}

bool PeerCut::seen(const std::string& conn, const std::string& peer, Clock::time_point now) {
  if (p_.conn_bytes == 0) return false;
  sweep(now);
  auto [it, fresh] = conns_.try_emplace(conn);
  it->second.peer = peer;
  it->second.last = now;
  return fresh;
}

uint64_t PeerCut::cuts(const std::string& peer) const {
  auto it = keys_.find(peer);
  return it == keys_.end() ? 0 : it->second.cuts;
}

namespace {
// "ADDR:PORT" of a socket address, "" if it is not IPv4/IPv6.
std::string numeric(const sockaddr_storage& a, socklen_t len, std::string* ip = nullptr) {
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return "";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  if (ip) *ip = host;
  return std::string(host) + ":" + port;
}
}  // namespace

std::string tcp_tuple(int fd, const std::string& peer_ip) {
  if (fd < 0) return "";
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof local, pl = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0)
    return "";
  std::string ip;
  const std::string l = numeric(local, ll), p = numeric(peer, pl, &ip);
  if (l.empty() || p.empty() || (!peer_ip.empty() && ip != peer_ip)) return "";
  return l + ">" + p;
}

bool shut_connection(const PeerCut::ConnInfo& c) {
  if (c.fd < 0 || c.tuple.empty() || tcp_tuple(c.fd, "") != c.tuple) return false;
  return ::shutdown(c.fd, SHUT_RDWR) == 0;
}

}  // namespace netprism::daemon
