// `netprism-aggregator --flow-listen ipfix://ADDR:PORT | sflow://ADDR:PORT`: UDP collectors for switch
// telemetry. Each exporter becomes a synthetic agent ("ipfix:ADDR" / "sflow:AGENT", flowin.hpp): the listener
// thread decodes datagrams into flowlets and hands them to the aggregator's own ingest endpoint as that
// agent's HELLO and batches, over the same ZeroMQ protocol agents speak. So exporters' records are stored,
// counted (`netprism nodes`, `status`), recorded and analysed exactly like agents' records, and the ingest
// path has a single entry.
#pragma once

#include "netprism/keys.hpp"

#include <map>
#include <stop_token>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "flowin.hpp"
#include "netprism/fd.hpp"

namespace netprism::flowin {

struct ListenSpec {
  Protocol proto = Protocol::kIpfix;
  std::string host;  // numeric IPv4/IPv6 address ("0.0.0.0", "::", "127.0.0.1")
  uint16_t port = 0;
};

// "ipfix://ADDR:PORT", "netflow://ADDR:PORT" (same decoder), "sflow://ADDR:PORT"; IPv6 as [ADDR]:PORT.
std::optional<ListenSpec> parse_listen(const std::string& url, std::string& err);

// A connectable form of the ingest's bind endpoint ("tcp://0.0.0.0:P" / "tcp://*:P" -> "tcp://127.0.0.1:P").
std::string local_endpoint(const std::string& listen);

class FlowListener {
 public:
  // Binds every UDP socket (throws std::runtime_error naming the URL when one cannot be bound).
  // curve: the client side to connect to a CURVE ingest with (daemon::Auth::collector_curve()); plain when
  // empty.
  FlowListener(zmq::context_t& ctx, const std::vector<std::string>& urls, const std::string& ingest,
               const keys::ClientCurve& curve = {});
  void run(std::stop_token stop);

 private:
  struct Socket {
    ListenSpec spec;
    Fd fd;
    std::unique_ptr<Decoder> decoder;
  };
  struct Node {  // one exporter as an agent
    bool hello_sent = false;
    uint64_t seq = 0;
    std::vector<Flowlet> pending;
  };
  void receive(Socket& s);
  void flush(bool all);
  void read_acks();

  std::vector<Socket> sockets_;
  zmq::socket_t dealer_;
  std::map<std::string, Node> nodes_;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(65536);  // one datagram (UDP's largest)
  uint64_t epoch_ = 0;
  uint64_t errors_logged_ = 0;
};

}  // namespace netprism::flowin
