// The RDMA sysfs counter reader: a fake /sys/class/infiniband tree whose counter files hold the input, split
// at NUL bytes (port_xmit_data, port_rcv_data, port_xmit_packets, port_rcv_packets, then hw counters), then
// two samples through to_sample() and counter_delta() as the agent does.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "rdma/sysfs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace netprism;
  namespace fs = std::filesystem;
  static const std::string root = fuzz::scratch_dir() + "/ib";
  static const std::vector<std::string> files = {"counters/port_xmit_data",     "counters/port_rcv_data",
                                                 "counters/port_xmit_packets",  "counters/port_rcv_packets",
                                                 "hw_counters/out_of_sequence", "hw_counters/np_cnp_sent",
                                                 "hw_counters/lifespan"};
  static const std::string port = root + "/mlx5_0/ports/1";
  static bool made = [] {
    fs::create_directories(port + "/counters");
    fs::create_directories(port + "/hw_counters");
    return true;
  }();
  (void)made;
  std::size_t start = 0;
  for (const auto& f : files) {
    std::size_t end = start;
    while (end < size && data[end] != 0) ++end;
    fuzz::write_file(port + "/" + f, data + std::min(start, size),
                     std::min(end, size) - std::min(start, size));
    start = end + 1;
  }
  for (const auto& p : agent::list_rdma_ports(root)) {
    agent::RawPortCounters a, b;
    std::string err;
    if (!agent::read_port_counters(p, a, err) || !agent::read_port_counters(p, b, err)) continue;
    (void)agent::to_sample(p, 1, a);
    (void)agent::counter_delta(a.xmit_words, b.xmit_words);
  }
  return 0;
}
