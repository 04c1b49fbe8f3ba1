#include "listener.hpp"

#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "daemon/log.hpp"
#include "netprism/addr.hpp"
#include "netprism/version.hpp"
#include "netprism/wire.hpp"

namespace netprism::flowin {
namespace {

// Exporters' records go to the ingest like an agent's: a batch per exporter every 100 ms (the agents'
// cadence, so the live analysis sees them as promptly), or sooner at 4,096 flowlets (~450 KiB on the wire,
// far below the ingest's 64 MiB message limit).
constexpr auto kFlushEvery = std::chrono::milliseconds(100);
constexpr size_t kFlushRecords = 4096;
// Exporters send in bursts (a template refresh, an expiry sweep of thousands of flows): 4 MiB of socket
// buffer holds ~3,000 full-size datagrams while this thread is descheduled.
constexpr int kRcvBuf = 4 << 20;
constexpr int kErrorLogPerSecond = 10;
// Every exporter becomes a registered node; a sender can claim any sFlow agent address, so their number is
// bounded: 4,096 is far above any fabric's switch count (a 32k-GPU cluster has ~2,000 switches).
constexpr size_t kMaxExporters = 4096;

sockaddr_storage to_sockaddr(const ListenSpec& s, socklen_t& len) {
  sockaddr_storage ss{};
  auto a = parse_addr(s.host);
  if (!a) throw std::runtime_error("'" + s.host + "' is not a numeric IP address");
  if (s.host.find(':') == std::string::npos) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(s.port);
    std::memcpy(&in->sin_addr, a->data() + 12, 4);
    len = sizeof *in;
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(s.port);
    std::memcpy(&in6->sin6_addr, a->data(), 16);
    len = sizeof *in6;
  }
  return ss;
}

uint16_t source_port(const sockaddr_storage& ss) {
  return ntohs(ss.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in*>(&ss)->sin_port
                                       : reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
}

std::string source_addr(const sockaddr_storage& ss) {
  Addr16 a{};
  if (ss.ss_family == AF_INET) {
    a[10] = a[11] = 0xff;
    std::memcpy(a.data() + 12, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, 4);
  } else {
    std::memcpy(a.data(), &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, 16);
  }
  return format_addr(a.data());
}

}  // namespace

std::optional<ListenSpec> parse_listen(const std::string& url, std::string& err) {
  auto sep = url.find("://");
  auto proto = sep == std::string::npos ? std::nullopt : parse_protocol(url.substr(0, sep));
  if (!proto) {
    err = "'" + url + "': expected ipfix://ADDR:PORT or sflow://ADDR:PORT";
    return std::nullopt;
  }
  std::string rest = url.substr(sep + 3), host;
  auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon + 1 == rest.size()) {
    err = "'" + url + "': no port";
    return std::nullopt;
  }
  host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  ListenSpec s{*proto, host, 0};
  unsigned long port = 0;
  try {
    size_t used = 0;
    port = std::stoul(rest.substr(colon + 1), &used);
    if (used != rest.size() - colon - 1) port = 0;
  } catch (const std::exception&) {
  }
  if (port == 0 || port > 65535) {
    err = "'" + url + "': port must be 1-65535";
    return std::nullopt;
  }
  s.port = static_cast<uint16_t>(port);
  if (!parse_addr(host)) {
    err = "'" + url + "': '" + host + "' is not a numeric IP address";
    return std::nullopt;
  }
  return s;
}

std::string local_endpoint(const std::string& listen) {
  for (const char* any : {"tcp://0.0.0.0:", "tcp://*:"})
    if (listen.rfind(any, 0) == 0) return "tcp://127.0.0.1:" + listen.substr(std::strlen(any));
  if (listen.rfind("tcp://[::]:", 0) == 0) return "tcp://[::1]:" + listen.substr(11);
  return listen;
}

FlowListener::FlowListener(zmq::context_t& ctx, const std::vector<std::string>& urls,
                           const std::string& ingest, const keys::ClientCurve& curve)
    : dealer_(ctx, zmq::socket_type::dealer), epoch_(daemon::now_unix_ns()) {
  for (const auto& url : urls) {
    std::string err;
    auto spec = parse_listen(url, err);
    if (!spec) throw std::runtime_error("--flow-listen " + err);
    socklen_t len = 0;
    sockaddr_storage ss = to_sockaddr(*spec, len);
    Fd fd(::socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0 || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
      throw std::runtime_error("--flow-listen " + url + ": cannot bind: " + std::strerror(errno));
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &kRcvBuf, sizeof kRcvBuf);  // best effort
    sockets_.push_back({*spec, std::move(fd), make_decoder(spec->proto)});
  }
  dealer_.set(zmq::sockopt::linger, 1000);
  keys::apply_client(dealer_.handle(), curve);
  dealer_.connect(local_endpoint(ingest));
}

void FlowListener::run(std::stop_token stop) {
  ::pthread_setname_np(::pthread_self(), "np-flowin");
  auto last_flush = std::chrono::steady_clock::now();
  std::vector<zmq::pollitem_t> items;
  for (const auto& s : sockets_) items.push_back({nullptr, s.fd.get(), ZMQ_POLLIN, 0});
  items.push_back({dealer_.handle(), 0, ZMQ_POLLIN, 0});
  while (!stop.stop_requested()) {
    zmq::poll(items.data(), items.size(), kFlushEvery);
    for (size_t i = 0; i < sockets_.size(); ++i)
      if (items[i].revents & ZMQ_POLLIN) receive(sockets_[i]);
    if (items.back().revents & ZMQ_POLLIN) read_acks();
    if (std::chrono::steady_clock::now() - last_flush >= kFlushEvery) {
      flush(true);
      last_flush = std::chrono::steady_clock::now();
    }
  }
  flush(true);
}

void FlowListener::receive(Socket& s) {
  static daemon::RateLimitedLog errors(kErrorLogPerSecond);
  std::vector<uint8_t>& buf = buf_;
  std::vector<Flowlet> fl;
  std::string node, err;
  // Everything queued now, then back to poll (bounded: a flood cannot keep this loop from flushing).
  for (int n = 0; n < 1024; ++n) {
    sockaddr_storage from{};
    socklen_t flen = sizeof from;
    ssize_t got = ::recvfrom(s.fd.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC,
                             reinterpret_cast<sockaddr*>(&from), &flen);
    if (got < 0) return;  // EAGAIN: drained
    std::string exporter = source_addr(from);
    fl.clear();
    if (static_cast<size_t>(got) > buf.size()) {
      errors.log(std::string(protocol_name(s.spec.proto)) + " datagram from " + exporter + " truncated");
      continue;
    }
    if (!s.decoder->decode(exporter, source_port(from), daemon::now_unix_ns(),
                           {buf.data(), static_cast<size_t>(got)}, fl, node, err))
      errors.log(std::string(protocol_name(s.spec.proto)) + " datagram rejected: " + err);
    if (fl.empty()) continue;
    if (nodes_.size() >= kMaxExporters && !nodes_.count(node)) {
      errors.log("records of exporter " + node + " dropped: already " + std::to_string(kMaxExporters) +
                 " exporters");
      continue;
    }
    auto& p = nodes_[node].pending;
    p.insert(p.end(), fl.begin(), fl.end());
  }
  flush(false);
}

// Sends the pending records of every exporter (all) or of those over the size bound.
void FlowListener::flush(bool all) {
  for (auto& [name, n] : nodes_) {
    if (n.pending.empty() || (!all && n.pending.size() < kFlushRecords)) continue;
    if (!n.hello_sent) {
      Hello h;
      h.node = name;
      h.agent_version = std::string("flow-listen ") + std::string(kVersion);
      h.epoch = epoch_;
      h.sent_ns = daemon::now_unix_ns();
      (void)dealer_.send(zmq::buffer(wire::encode(h)), zmq::send_flags::dontwait);
      n.hello_sent = true;
    }
    Batch b;
    b.node = name;
    b.epoch = epoch_;
    b.seq = n.seq++;
    b.sent_ns = daemon::now_unix_ns();
    b.flowlets.swap(n.pending);
    // Lossy by design, like the exporters' UDP: a batch the ingest cannot take now (send queue full) is
    // dropped rather than blocking the sockets, whose own buffers would then overflow anyway.
    (void)dealer_.send(zmq::buffer(wire::encode(b)), zmq::send_flags::dontwait);
  }
}

// ACKs: an aggregator that lost the exporter's registration (restart of the store) asks for a HELLO again.
void FlowListener::read_acks() {
  zmq::message_t m;
  while (dealer_.recv(m, zmq::recv_flags::dontwait)) {
    auto d = wire::decode({static_cast<const char*>(m.data()), m.size()}, {});
    if (!d || d.message->type != MsgType::kAck) continue;
    const auto& a = std::get<Ack>(d.message->body);
    if (a.status == AckStatus::kUnknownNode)
      for (auto& [name, n] : nodes_) n.hello_sent = false;
  }
}

}  // namespace netprism::flowin
