// Prints the RDMA records an aggregator stored (every agent's counter samples, QP-table rows and port
// bursts), as one JSON document: {"samples": [...], "qps": [...], "bursts": [...]}. The soft-RoCE VM test
// (rdma_verbs_test.py) compares them with what the VMs' own tools report; `netprism` has no query for them
// yet. Usage: np_rdma_dump DATA_DIR
#include <iostream>

#include <nlohmann/json.hpp>

#include "store.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: np_rdma_dump DATA_DIR\n";
    return 2;
  }
  try {
    netprism::store::Store s(argv[1], netprism::store::Db::Mode::kReadOnly);
    nlohmann::json samples = nlohmann::json::array(), qps = nlohmann::json::array(),
                   bursts = nlohmann::json::array();
    s.scan_batches(std::nullopt, 0, UINT64_MAX, [&](const netprism::Batch& b, uint64_t) {
      for (const auto& r : b.rdma_samples)
        samples.push_back({{"node", b.node},
                           {"device", r.device},
                           {"port", r.port},
                           {"ts_ns", r.ts_ns},
                           {"xmit_bytes", r.xmit_bytes},
                           {"rcv_bytes", r.rcv_bytes},
                           {"xmit_packets", r.xmit_packets},
                           {"rcv_packets", r.rcv_packets},
                           {"hw", r.hw}});
      for (const auto& q : b.qps)
        qps.push_back({{"node", b.node},
                       {"device", q.device},
                       {"port", q.port},
                       {"lqpn", q.lqpn},
                       {"rqpn", q.rqpn},
                       {"type", q.type},
                       {"state", q.state},
                       {"src_addr", q.src_addr},
                       {"dst_addr", q.dst_addr},
                       {"pid", q.pid},
                       {"comm", q.comm},
                       {"sq_psn", q.sq_psn},
                       {"rq_psn", q.rq_psn},
                       {"ts_ns", q.ts_ns},
                       {"sent_ns", b.sent_ns}});
      for (const auto& r : b.rdma_bursts)
        bursts.push_back({{"node", b.node},
                          {"device", r.device},
                          {"port", r.port},
                          {"first_ns", r.first_ns},
                          {"last_ns", r.last_ns},
                          {"xmit_bytes", r.xmit_bytes},
                          {"rcv_bytes", r.rcv_bytes},
                          {"xmit_packets", r.xmit_packets},
                          {"rcv_packets", r.rcv_packets}});
    });
    std::cout << nlohmann::json{{"samples", samples}, {"qps", qps}, {"bursts", bursts}}.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "np_rdma_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
