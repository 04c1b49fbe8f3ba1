// Writes the fuzzers' seed corpora (tests/fuzz/corpus/<fuzzer>/): real encodings made by the real encoders,
// so the fuzzers start from valid inputs of every kind. Run once by hand when a format changes:
//   build-fuzz/tests/fuzz/make_seeds tests/fuzz/corpus SAMPLE_FLOWS.csv
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "agent/nl_builder.hpp"
#include "batch_codec.hpp"
#include "netprism/addr.hpp"
#include "netprism/wire.hpp"
#include "spool.hpp"

using namespace netprism;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

Batch sample_batch() {
  Batch b;
  b.node = "node-a";
  b.epoch = 1795574346475443911ull;
  b.seq = 42;
  b.sent_ns = b.epoch + 1000;
  for (int i = 0; i < 3; ++i) {
    Flowlet f{};
    auto s = parse_addr("10.213.5.1"), d = parse_addr(i == 2 ? "fd00::2" : "10.213.5.2");
    std::memcpy(f.key.saddr, s->data(), 16);
    std::memcpy(f.key.daddr, d->data(), 16);
    f.key.family = i == 2 ? 6 : 4;
    f.key.proto = i == 1 ? NP_PROTO_UDP : NP_PROTO_TCP;
    f.key.sport = static_cast<uint16_t>(40000 + i);
    f.key.dport = i == 1 ? 4791 : 29500;
    f.key.ifindex = 2;
    f.first_ns = b.sent_ns - 5'000'000 + static_cast<uint64_t>(i) * 1'000'000;
    f.last_ns = f.first_ns + 900'000;
    f.packets = 100u << (8 * i);  // small and wide integer encodings
    f.bytes = f.packets * 1500;
    f.payload_bytes = f.packets * 1448;
    f.end_reason = NP_END_GAP;
    b.flowlets.push_back(f);
  }
  b.rdma_samples.push_back({"mlx5_0", 1, b.sent_ns, 4000, 1000, 7, 3, {{"np_cnp_sent", 2}}});
  b.rdma_bursts.push_back({"mlx5_0", 1, b.sent_ns - 100, b.sent_ns, 4000, 1000, 7, 3});
  b.qps.push_back({"mlx5_0", 1, 0x1a2, 0x3b4, "RC", "RTS", "10.213.7.1", "10.213.7.2", 4242, "python3"});
  b.counters = {{"captured", 3}, {"shipped", 2}};
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "make_seeds: OUT_DIR [FLOWS.csv]\n";
    return 2;
  }
  fs::path out = argv[1];
  Batch b = sample_batch();
  Hello h{"node-a", "0.1.0", b.epoch, {{"eth0", 2, {"10.213.5.1", "fd00::1"}}}, {"chrony", true, 1000},
          b.sent_ns};
  put(out / "wire", "hello", wire::encode(h));
  put(out / "wire", "batch", wire::encode(b));
  // Every integer at its widest encoding (the decoder's fast path must bound the whole record).
  Batch wide = b;
  for (auto& f : wide.flowlets) {
    f.key.ifindex = f.key.qpn = 0xffffffffu;
    f.key.sport = f.key.dport = 0xffff;
    f.first_ns = f.last_ns = f.packets = f.bytes = f.payload_bytes = ~0ull;
    for (auto& r : f.roce_ops) r = 0xffffffffu;
    f.last_psn = 0xffffffffu;
    f.tcp_flags = 0xffff;
  }
  put(out / "wire", "batch_wide", wire::encode(wide));
  put(out / "wire", "ack", wire::encode(Ack{b.epoch, 42, AckStatus::kRejected, "bad", b.sent_ns}));
  put(out / "wire", "heartbeat", wire::encode(Heartbeat{"node-a", b.epoch, b.sent_ns, {{"captured", 1}}}));

  std::string stored, scratch, z;
  store::encode_stored(b, stored);
  put(out / "stored_batch", "columns", stored);
  store::compress_stored(b, -1, z, scratch);
  put(out / "stored_batch", "zstd", z);

  test::NlBuilder qp;
  test::qp_message(qp, 3, "mlx5_0");
  qp.done();
  put(out / "rdma_netlink", "qp", std::string(qp.bytes().begin(), qp.bytes().end()));
  test::NlBuilder cm;
  cm.begin_msg(RDMA_NLDEV_CMD_RES_CM_ID_GET);
  cm.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 3);
  cm.str(RDMA_NLDEV_ATTR_DEV_NAME, "mlx5_0");
  cm.begin_nest(RDMA_NLDEV_ATTR_RES_CM_ID);
  cm.begin_nest(RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY);
  cm.u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
  cm.u32(RDMA_NLDEV_ATTR_RES_LQPN, 0x1a2);
  test::sockaddr_attr(cm, RDMA_NLDEV_ATTR_RES_SRC_ADDR, "10.213.7.1");
  test::sockaddr_attr(cm, RDMA_NLDEV_ATTR_RES_DST_ADDR, "fd00::7");
  cm.end_nest();
  cm.end_nest();
  cm.end_msg();
  cm.error(-1);
  put(out / "rdma_netlink", "cm", std::string(cm.bytes().begin(), cm.bytes().end()));
  test::NlBuilder dev;
  dev.begin_msg(RDMA_NLDEV_CMD_GET);
  dev.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 5);
  dev.str(RDMA_NLDEV_ATTR_DEV_NAME, "rxe0");
  dev.end_msg();
  dev.done();
  put(out / "rdma_netlink", "dev", std::string(dev.bytes().begin(), dev.bytes().end()));

  static constexpr char kCounters[] =
      "1000\n\0"
      "250\n\0"
      "7\n\0"
      "3\n\0"
      "5\n\0"
      "6\n\0"
      "1000\n";
  put(out / "sysfs", "counters", std::string(kCounters, sizeof kCounters - 1));

  put(out / "config", "small",
      "aggregator = \"tcp://10.0.0.1:7470\"\niface = [\"eth0\", \"ib0\"]\ninsecure = "
      "false\n[delivery]\nwindow = "
      "8\n[budget]\ncpu_percent = 1.5\n[rdma]\nenabled = true\n");

  fs::path sp = fs::temp_directory_path() / "np_make_seeds_spool";
  fs::remove_all(sp);
  {
    agent::Spool spool(sp.string(), 1 << 20);
    std::string err;
    if (!spool.open(err) || !spool.push({1, 2}, wire::encode(b), 3)) {
      std::cerr << "make_seeds: spool: " << err << "\n";
      return 1;
    }
  }
  for (const auto& f : fs::directory_iterator(sp)) {
    std::ifstream in(f.path(), std::ios::binary);
    put(out / "spool", "batch", std::string(std::istreambuf_iterator<char>(in), {}));
  }
  fs::remove_all(sp);

  if (argc > 2) {  // the first lines of a real recording's flow CSV
    std::ifstream in(argv[2]);
    std::string line, text;
    for (int i = 0; i < 40 && std::getline(in, line); ++i) text += line + "\n";
    put(out / "csv", "flows", text);
  }
  return 0;
}
