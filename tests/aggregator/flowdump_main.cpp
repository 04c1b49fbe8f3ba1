// np_flowdump CAPTURE ipfix|sflow: the flowlets netprism decodes from a capture of exporters' datagrams, as
// CSV (node,src_ip,dst_ip,src_port,dst_port,proto,qpn,first_ns,last_ns,packets,bytes,payload_bytes), then a
// "# stats" line. For the end-to-end test's byte comparison (tests/e2e/flow_export_test.py).
#include <cstdio>

#include "flowin.hpp"
#include "netprism/addr.hpp"

int main(int argc, char** argv) {
  using namespace netprism;
  auto proto = argc == 3 ? flowin::parse_protocol(argv[2]) : std::nullopt;
  if (!proto) {
    std::fprintf(stderr, "usage: np_flowdump CAPTURE ipfix|sflow\n");
    return 2;
  }
  flowin::Stats st;
  std::string err;
  auto r = flowin::read_capture(argv[1], *proto, st, err);
  if (!r) {
    std::fprintf(stderr, "np_flowdump: %s\n", err.c_str());
    return 1;
  }
  std::printf(
      "node,src_ip,dst_ip,src_port,dst_port,proto,qpn,first_ns,last_ns,packets,bytes,payload_bytes\n");
  for (const auto& [node, v] : *r)
    for (const auto& f : v)
      std::printf("%s,%s,%s,%u,%u,%u,%u,%llu,%llu,%llu,%llu,%llu\n", node.c_str(),
                  format_addr(f.key.saddr).c_str(), format_addr(f.key.daddr).c_str(), f.key.sport,
                  f.key.dport, f.key.proto, f.key.qpn, static_cast<unsigned long long>(f.first_ns),
                  static_cast<unsigned long long>(f.last_ns), static_cast<unsigned long long>(f.packets),
                  static_cast<unsigned long long>(f.bytes), static_cast<unsigned long long>(f.payload_bytes));
  std::printf("# stats datagrams=%llu records=%llu skipped=%llu no_template=%llu errors=%llu\n",
              static_cast<unsigned long long>(st.datagrams), static_cast<unsigned long long>(st.records),
              static_cast<unsigned long long>(st.skipped_records),
              static_cast<unsigned long long>(st.no_template), static_cast<unsigned long long>(st.errors));
  return 0;
}
