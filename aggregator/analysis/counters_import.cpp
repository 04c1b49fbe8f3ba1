// `netprism analyze --format rdma-counters`: an RDMA counters recording (docs/formats.md) as analysis input.
// The records are the agent's own (RdmaPortBurst, QpEntry), each with the node that read it; a file of them
// is what a counters-only agent ships, gathered in one document (tests derive such files from recordings:
// tests/e2e/counters_derive.py).
#include <fstream>

#include "analysis.hpp"
#include "netprism/flowlet.h"
#include "topology.hpp"

namespace netprism::analysis {
namespace {

using nlohmann::json;

// A required field of entry `i` of array `what`; throws with the field named.
template <class T>
T field(const json& e, const char* name, const char* what, size_t i) {
  auto it = e.find(name);
  if (it == e.end()) throw std::runtime_error(std::string(what) + "[" + std::to_string(i) + "]: no " + name);
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw std::runtime_error(std::string(what) + "[" + std::to_string(i) + "]." + name + ": wrong type");
  }
}

NodePortBurst burst_of(const json& e, size_t i) {
  NodePortBurst b;
  const char* w = "rdma_bursts";
  b.node = field<std::string>(e, "node", w, i);
  b.burst.device = e.value("device", "");
  b.burst.port = e.value("port", 1u);
  b.burst.first_ns = field<uint64_t>(e, "first_ns", w, i);
  b.burst.last_ns = field<uint64_t>(e, "last_ns", w, i);
  if (b.burst.last_ns < b.burst.first_ns)
    throw std::runtime_error(std::string(w) + "[" + std::to_string(i) + "]: last_ns before first_ns");
  b.burst.xmit_bytes = field<uint64_t>(e, "xmit_bytes", w, i);
  b.burst.rcv_bytes = field<uint64_t>(e, "rcv_bytes", w, i);
  b.burst.xmit_packets = e.value("xmit_packets", uint64_t{0});
  b.burst.rcv_packets = e.value("rcv_packets", uint64_t{0});
  return b;
}

NodeQp qp_of(const json& e, size_t i) {
  NodeQp q;
  const char* w = "qps";
  q.node = field<std::string>(e, "node", w, i);
  q.seen_ns = field<uint64_t>(e, "seen_ns", w, i);
  q.qp.device = e.value("device", "");
  q.qp.port = e.value("port", 1u);
  q.qp.lqpn = field<uint32_t>(e, "lqpn", w, i);
  q.qp.rqpn = e.value("rqpn", 0u);
  q.qp.type = field<std::string>(e, "type", w, i);
  q.qp.state = e.value("state", "");
  q.qp.src_addr = e.value("src_addr", "");
  q.qp.dst_addr = e.value("dst_addr", "");
  q.qp.pid = e.value("pid", 0u);
  q.qp.comm = e.value("comm", "");
  q.qp.sq_psn = e.value("sq_psn", 0u);
  q.qp.rq_psn = e.value("rq_psn", 0u);
  return q;
}

// A flow row (the CSV import's columns, contracts.md) as JSON: the TCP flows the probe still sees.
FlowEvent flow_of(const json& e, size_t i) {
  const char* w = "flows";
  FlowEvent f;
  f.src = field<std::string>(e, "src_ip", w, i);
  f.dst = field<std::string>(e, "dst_ip", w, i);
  auto num = [&](const char* name, uint64_t dflt) -> uint64_t {
    auto it = e.find(name);
    if (it == e.end()) return dflt;
    if (it->is_string()) return it->get<std::string>().empty() ? dflt : std::stoull(it->get<std::string>());
    return it->get<uint64_t>();
  };
  f.src_port = static_cast<uint16_t>(num("src_port", 0));
  f.dst_port = static_cast<uint16_t>(num("dst_port", 0));
  f.bytes = num("bytes", 0);
  f.first_ns = num("start_ns", 0);
  f.last_ns = std::max(f.first_ns, num("end_ns", 0));
  f.packets = num("packets", 0);
  f.tcp_flags = static_cast<uint16_t>(num("tcp_flags", 0));
  std::string proto = e.value("proto", "tcp");
  f.proto = proto == "udp" ? NP_PROTO_UDP : proto == "roce" ? NP_PROTO_ROCE : NP_PROTO_TCP;
  f.qpn = static_cast<uint32_t>(num("qpn", 0));
  f.observer = e.value("node", "");
  return f;
}

}  // namespace

std::optional<Input> load_rdma_counters(const std::string& path, const std::string& topology_path,
                                        std::string& err) {
  std::ifstream f(path);
  if (!f) {
    err = path + ": cannot open";
    return std::nullopt;
  }
  Input in;
  in.offline = true;
  try {
    json doc = json::parse(f);
    if (!doc.is_object() || !doc.contains("rdma_bursts") || !doc["rdma_bursts"].is_array())
      throw std::runtime_error("not an RDMA counters recording (no rdma_bursts array)");
    in.addr_node = doc.value("addr_node", std::map<std::string, std::string>{});
    in.qp_read_ns = doc.value("qp_read_ns", std::map<std::string, uint64_t>{});
    const json& bursts = doc["rdma_bursts"];
    for (size_t i = 0; i < bursts.size(); ++i) {
      in.rdma_bursts.push_back(burst_of(bursts[i], i));
      in.now_ns = std::max(in.now_ns, in.rdma_bursts.back().burst.last_ns);
    }
    if (auto q = doc.find("qps"); q != doc.end() && q->is_array())
      for (size_t i = 0; i < q->size(); ++i) in.qps.push_back(qp_of((*q)[i], i));
    if (auto fl = doc.find("flows"); fl != doc.end() && fl->is_array())
      for (size_t i = 0; i < fl->size(); ++i) {
        in.events.push_back(flow_of((*fl)[i], i));
        in.now_ns = std::max(in.now_ns, in.events.back().last_ns);
      }
  } catch (const std::exception& e) {
    err = path + ": " + e.what();
    return std::nullopt;
  }
  if (!topology_path.empty() && !load_topology(topology_path, in.addr_node, err)) return std::nullopt;
  return in;
}

}  // namespace netprism::analysis
