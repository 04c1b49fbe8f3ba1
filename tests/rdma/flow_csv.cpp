// Prints the flowlets an aggregator stored as the flow CSV of contracts.md (the testbed recordings' format,
// tests/e2e/samples/README.md) with the RoCE destination QP added: src_ip,dst_ip,src_port,dst_port,bytes,
// start_ns,end_ns,proto,packets,node,tcp_flags,qpn. Egress flowlets only (each packet once, at its sender,
// as the testbed's tcpdump -Q out recordings): the soft-RoCE run's recording (scripts/rdmabed run).
// Usage: np_flow_csv DATA_DIR
#include <cstdio>
#include <iostream>
#include <string>

#include "netprism/addr.hpp"
#include "store.hpp"

int main(int argc, char** argv) {
  const bool egress_only = argc == 3 && std::string(argv[2]) == "--egress";
  if (argc != 2 && !egress_only) {
    std::cerr << "usage: np_flow_csv DATA_DIR [--egress]\n";
    return 2;
  }
  try {
    netprism::store::Store s(argv[1], netprism::store::Db::Mode::kReadOnly);
    std::printf("src_ip,dst_ip,src_port,dst_port,bytes,start_ns,end_ns,proto,packets,node,tcp_flags,qpn\n");
    s.scan_batches(std::nullopt, 0, UINT64_MAX, [&](const netprism::Batch& b, uint64_t) {
      for (const auto& f : b.flowlets) {
        if (egress_only && f.key.dir != NP_DIR_EGRESS) continue;
        const char* proto = f.key.proto == NP_PROTO_ROCE  ? "roce"
                            : f.key.proto == NP_PROTO_TCP ? "tcp"
                                                          : "udp";
        std::printf("%s,%s,%u,%u,%llu,%llu,%llu,%s,%llu,%s,%u,%u\n",
                    netprism::format_addr(f.key.saddr).c_str(), netprism::format_addr(f.key.daddr).c_str(),
                    f.key.sport, f.key.dport, static_cast<unsigned long long>(f.bytes),
                    static_cast<unsigned long long>(f.first_ns), static_cast<unsigned long long>(f.last_ns),
                    proto, static_cast<unsigned long long>(f.packets), b.node.c_str(), f.tcp_flags,
                    f.key.qpn);
      }
    });
  } catch (const std::exception& e) {
    std::cerr << "np_flow_csv: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
