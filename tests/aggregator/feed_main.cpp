// np_feed: plays N synthetic agents into a running aggregator over the real wire protocol -- each one says
// HELLO, then ships one batch per iteration of a data-parallel ring all-reduce (each node sends a burst to
// its ring neighbour at the end of every step; both ends observe it). Exits 0 when every batch was
// acknowledged as stored, and prints a JSON summary.
#include <iostream>
#include <string>
#include <vector>

#include "test_sender.hpp"

using namespace netprism;
using namespace netprism::test;

int main(int argc, char** argv) {
  std::string endpoint, prefix = "node", keys_dir;
  int nodes = 4, iterations = 30, subnet = 77;
  uint64_t step_ms = 400;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--endpoint")
      endpoint = v;
    else if (k == "--nodes")
      nodes = std::stoi(v);
    else if (k == "--iterations")
      iterations = std::stoi(v);
    else if (k == "--step-ms")
      step_ms = std::stoull(v);
    else if (k == "--subnet")
      subnet = std::stoi(v);
    else if (k == "--prefix")
      prefix = v;
    else if (k == "--keys-dir")  // CURVE: NODE.key per node and server.pub (the aggregator's public key)
      keys_dir = v;
    else {
      std::cerr << "np_feed: unknown option " << k << "\n";
      return 2;
    }
  }
  if (endpoint.empty() || nodes < 2) {
    std::cerr
        << "np_feed: --endpoint E [--nodes N>=2] [--iterations K] [--step-ms S] [--subnet X] [--prefix P] "
           "[--keys-dir D]\n";
    return 2;
  }
  zmq::context_t ctx;
  std::vector<std::unique_ptr<TestSender>> senders;
  auto ip = [&](int i) { return "10.213." + std::to_string(subnet) + "." + std::to_string(i + 1); };
  auto name = [&](int i) { return prefix + std::to_string(i); };
  const uint64_t epoch = unix_ns();
  for (int i = 0; i < nodes; ++i) {
    keys::ClientCurve curve;
    if (!keys_dir.empty())
      if (auto e = keys::load_client(keys_dir + "/" + name(i) + ".key", keys_dir + "/server.pub", curve);
          !e.empty()) {
        std::cerr << "np_feed: " << e << "\n";
        return 2;
      }
    senders.push_back(std::make_unique<TestSender>(ctx, endpoint, curve));
    auto a = senders.back()->hello(name(i), epoch, {ip(i) + "/24"});
    if (!a || a->status != AckStatus::kHelloOk) {
      std::cerr << "np_feed: HELLO of " << name(i) << " not accepted\n";
      return 1;
    }
  }
  const uint64_t step = step_ms * 1000000ull;
  const uint64_t t0 = unix_ns() - static_cast<uint64_t>(iterations + 1) * step;
  const uint64_t burst_bytes = 8ull << 20;
  uint64_t batches = 0, records = 0;
  for (int k = 0; k < iterations; ++k) {
    // Compute takes 70 % of the step, the all-reduce the next 25 %.
    uint64_t start = t0 + static_cast<uint64_t>(k) * step + step * 70 / 100;
    uint64_t end = start + step * 25 / 100;
    for (int i = 0; i < nodes; ++i) {
      int next = (i + 1) % nodes, prev = (i + nodes - 1) % nodes;
      Batch b;
      b.node = name(i);
      b.epoch = epoch;
      b.seq = static_cast<uint64_t>(k);
      b.sent_ns = unix_ns();
      uint16_t sport_out = static_cast<uint16_t>(41000 + i), sport_in = static_cast<uint16_t>(41000 + prev);
      b.flowlets.push_back(
          make_flowlet(ip(i), ip(next), sport_out, 29500, start, end, burst_bytes, burst_bytes / 1500));
      b.flowlets.push_back(make_flowlet(ip(next), ip(i), 29500, sport_out, start, end, burst_bytes / 40,
                                        burst_bytes / 3000, NP_DIR_INGRESS));
      b.flowlets.push_back(make_flowlet(ip(prev), ip(i), sport_in, 29500, start, end, burst_bytes,
                                        burst_bytes / 1500, NP_DIR_INGRESS));
      b.flowlets.push_back(
          make_flowlet(ip(i), ip(prev), 29500, sport_in, start, end, burst_bytes / 40, burst_bytes / 3000));
      b.counters = {{"captured", static_cast<uint64_t>(4 * (k + 1))},
                    {"shipped", static_cast<uint64_t>(4 * (k + 1))}};
      auto a = senders[i]->batch(b);
      if (!a || a->status != AckStatus::kOk) {
        std::cerr << "np_feed: batch " << k << " of " << name(i) << " not stored\n";
        return 1;
      }
      batches++;
      records += b.flowlets.size();
    }
  }
  nlohmann::json out = {{"batches", batches}, {"records", records}, {"first_ns", t0}, {"epoch", epoch}};
  std::cout << out.dump() << "\n";
  return 0;
}
