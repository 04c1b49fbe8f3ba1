// The RDMA netlink dump parsers (devices, QPs, CM ids): kernel replies, but parsed as untrusted bytes.
#include <cstdint>
#include <cstring>
#include <vector>

#include "rdma/netlink.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace netprism;
  using namespace netprism::agent;
  // A copy of exactly `size` bytes (heap), so a read past the end is caught by ASan.
  std::vector<uint8_t> buf(data, data + size);
  std::vector<RdmaDevice> devs;
  std::vector<QpEntry> qps;
  std::vector<CmIdEntry> cms;
  (void)parse_dev_messages(buf.data(), buf.size(), devs);
  (void)parse_qp_messages(buf.data(), buf.size(), qps);
  (void)parse_cm_id_messages(buf.data(), buf.size(), cms);
  complete_qp_table(qps, cms, [](uint32_t) { return std::string("x"); });
  return 0;
}
