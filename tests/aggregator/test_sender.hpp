// A test agent built on the real wire codec and a real DEALER socket, plus helpers to run the real
// netprism-aggregator binary (tests, CLI feeder and bench/ingest share it).
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "netprism/addr.hpp"
#include "netprism/keys.hpp"
#include "netprism/wire.hpp"

namespace netprism::test {

inline uint64_t unix_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// A free loopback TCP port (bound then released; the race with other processes is harmless in tests).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline Flowlet make_flowlet(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
                            uint64_t first_ns, uint64_t last_ns, uint64_t bytes, uint64_t packets,
                            uint8_t dir = NP_DIR_EGRESS, uint8_t proto = NP_PROTO_TCP) {
  Flowlet f{};
  auto s = parse_addr(src), d = parse_addr(dst);
  if (!s || !d) throw std::invalid_argument("bad address");
  std::memcpy(f.key.saddr, s->data(), 16);
  std::memcpy(f.key.daddr, d->data(), 16);
  f.key.ifindex = 2;
  f.key.sport = sport;
  f.key.dport = dport;
  f.key.proto = proto;
  f.key.dir = dir;
  f.key.family = is_v4_mapped(s->data()) ? 4 : 6;
  f.first_ns = first_ns;
  f.last_ns = last_ns;
  f.packets = packets;
  f.bytes = bytes;
  f.payload_bytes = bytes > packets * 52 ? bytes - packets * 52 : 0;
  f.end_reason = NP_END_GAP;
  return f;
}

// A batch of `flowlets` one-flow records between two test addresses, dated just before now (what the ingest
// tests send as a valid agent's batch). Flowlet i has source port sport + i and i extra bytes, so records
// stay distinct.
struct BatchShape {
  std::string src = "10.213.9.1";
  std::string dst = "10.213.9.2";
  uint16_t sport = 40000;
  std::size_t flowlets = 1;
};

inline Batch flowlet_batch(const std::string& node, uint64_t epoch, uint64_t seq,
                           const BatchShape& shape = {}) {
  Batch b;
  b.node = node;
  b.epoch = epoch;
  b.seq = seq;
  b.sent_ns = unix_ns();
  uint64_t t = b.sent_ns - 1000000;
  for (std::size_t i = 0; i < shape.flowlets; ++i)
    b.flowlets.push_back(make_flowlet(shape.src, shape.dst, static_cast<uint16_t>(shape.sport + i), 29500, t,
                                      t + 500000 + i, 1500 * 10 + i, 10));
  return b;
}

class TestSender {
 public:
  // `curve` enabled: a CURVE client (the aggregator's ZAP handler decides whether it gets in).
  TestSender(zmq::context_t& ctx, const std::string& endpoint, const keys::ClientCurve& curve = {})
      : s_(ctx, zmq::socket_type::dealer) {
    s_.set(zmq::sockopt::linger, 0);
    keys::apply_client(s_.handle(), curve);
    s_.connect(endpoint);
  }
  void send_raw(std::string_view bytes) { (void)s_.send(zmq::buffer(bytes), zmq::send_flags::none); }
  // For a sender the daemon may refuse mid-way (a cut flooder): libzmq can end its session after a failed
  // handshake, and a blocking send without a connection would then wait forever. False if not queued.
  bool send_raw_nowait(std::string_view bytes) {
    return s_.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
  }
  void send_parts(const std::vector<std::string>& parts) {
    for (std::size_t i = 0; i < parts.size(); ++i)
      (void)s_.send(zmq::buffer(parts[i]),
                    i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  std::optional<Ack> recv_ack(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    zmq::pollitem_t it[] = {{s_.handle(), 0, ZMQ_POLLIN, 0}};
    if (zmq::poll(it, 1, timeout) <= 0) return std::nullopt;
    zmq::message_t m;
    if (!s_.recv(m, zmq::recv_flags::dontwait)) return std::nullopt;
    auto d = wire::decode(m.to_string_view());
    if (!d || d.message->type != MsgType::kAck) return std::nullopt;
    return std::get<Ack>(d.message->body);
  }
  std::optional<Ack> hello(const std::string& node, uint64_t epoch,
                           const std::vector<std::string>& addrs = {}) {
    Hello h;
    h.node = node;
    h.agent_version = "test";
    h.epoch = epoch;
    h.interfaces.push_back({"eth0", 2, addrs});
    h.clock = {"chrony", true, 1000};
    h.sent_ns = unix_ns();
    send_raw(wire::encode(h));
    return recv_ack();
  }
  std::optional<Ack> batch(const Batch& b) {
    send_raw(wire::encode(b));
    return recv_ack();
  }
  zmq::socket_t& socket() { return s_; }

 private:
  zmq::socket_t s_;
};

// The real daemon as a child process; stopped (SIGTERM, then SIGKILL) when destroyed. Plain TCP
// (--insecure) unless `extra` gives a --server-key; then query() uses the key set with set_client().
class AggregatorProcess {
 public:
  AggregatorProcess(const std::string& binary, const std::string& data_dir, int listen_port, int query_port,
                    std::vector<std::string> extra = {})
      : listen_("tcp://127.0.0.1:" + std::to_string(listen_port)),
        query_("tcp://127.0.0.1:" + std::to_string(query_port)) {
    std::vector<std::string> args = {binary, "--listen", listen_, "--query", query_, "--data-dir", data_dir};
    args.insert(args.end(), extra.begin(), extra.end());
    if (std::find(extra.begin(), extra.end(), "--server-key") == extra.end()) args.push_back("--insecure");
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      if (const char* log = std::getenv("NP_AGGREGATOR_LOG")) {
        FILE* f = std::freopen(log, "a", stderr);
        (void)f;
      }
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
  }
  ~AggregatorProcess() { stop(SIGTERM); }
  AggregatorProcess(const AggregatorProcess&) = delete;
  AggregatorProcess& operator=(const AggregatorProcess&) = delete;

  pid_t pid() const { return pid_; }
  void set_client(keys::ClientCurve c) { client_ = std::move(c); }
  const std::string& listen() const { return listen_; }
  const std::string& query() const { return query_; }

  // Sends sig and reaps (SIGKILL after 10 s if it will not go); returns the wait status.
  int stop(int sig) {
    if (pid_ <= 0) return 0;
    ::kill(pid_, sig);
    int st = 0;
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return st;
  }
  bool alive() {
    if (pid_ <= 0) return false;
    int st = 0;
    return ::waitpid(pid_, &st, WNOHANG) == 0;
  }
  long rss_kib() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
  }

  // One query; nullopt on timeout.
  std::optional<nlohmann::json> query(zmq::context_t& ctx, const nlohmann::json& req,
                                      int timeout_ms = 3000) const {
    zmq::socket_t s(ctx, zmq::socket_type::req);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, timeout_ms);
    keys::apply_client(s.handle(), client_);
    s.connect(query_);
    auto text = req.dump();
    (void)s.send(zmq::buffer(text), zmq::send_flags::none);
    zmq::message_t m;
    if (!s.recv(m)) return std::nullopt;
    return nlohmann::json::parse(m.to_string_view());
  }
  // Waits until the query endpoint answers (the daemon is up).
  bool wait_ready(zmq::context_t& ctx, std::chrono::seconds limit = std::chrono::seconds(20)) const {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (auto r = query(ctx, {{"cmd", "status"}}, 500); r && r->value("ok", false)) return true;
    }
    return false;
  }

 private:
  std::string listen_, query_;
  pid_t pid_ = -1;
  keys::ClientCurve client_;
};

}  // namespace netprism::test
