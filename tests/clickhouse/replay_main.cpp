// np_replay: plays a flow CSV (contracts.md; tests/e2e/samples) into running aggregators as the agents of the
// nodes it names, over the real wire protocol: each node says HELLO with its topology address, then ships its
// rows in time order as flowlets, 64 per batch, to the aggregator `--route NODE=ENDPOINT` gives it (nodes
// without a route go to --endpoint). A row becomes the flowlet its observer's agent would have shipped:
// egress when the observer sent it (the samples record outgoing packets only), payload = the data bytes the
// CSV import counts for the row. --shift-to-now moves every row by one offset so that the sample's last row
// ends now (a live analysis judges times against its clock: the analysis role's test). Exits 0 when every
// batch was acknowledged as stored and prints {"batches", "records"}.
#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "analysis.hpp"
#include "stages.hpp"
#include "test_sender.hpp"
#include "topology.hpp"

using namespace netprism;
using namespace netprism::test;

namespace {
Flowlet to_flowlet(const analysis::FlowEvent& e, const std::string& observer_addr) {
  Flowlet f = make_flowlet(e.src, e.dst, e.src_port, e.dst_port, e.first_ns, e.last_ns, e.bytes, e.packets,
                           e.src == observer_addr ? NP_DIR_EGRESS : NP_DIR_INGRESS, e.proto);
  f.key.qpn = e.qpn;
  f.tcp_flags = e.tcp_flags;
  // The data bytes the analysis counts for the CSV row (its IP bytes unless they fit pure ACKs), so the
  // flowlet carries the same transfer volume as the row it replays.
  f.payload_bytes = analysis::data_bytes(0, -1, analysis::is_v6(e.src), e.packets, e.bytes);
  return f;
}
}  // namespace

int main(int argc, char** argv) {
  std::string csv, topology, endpoint;
  std::map<std::string, std::string> route;
  bool shift = false;
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--shift-to-now") {
      shift = true;
      --i;
      continue;
    }
    std::string v = i + 1 < argc ? argv[i + 1] : "";
    if (i + 1 >= argc) k = "";  // a flag without its value
    if (k == "--csv")
      csv = v;
    else if (k == "--topology")
      topology = v;
    else if (k == "--endpoint")
      endpoint = v;
    else if (k == "--route" && v.find('=') != std::string::npos)
      route[v.substr(0, v.find('='))] = v.substr(v.find('=') + 1);
    else {
      std::cerr << "np_replay: --csv FILE --topology FILE [--endpoint E] [--route NODE=ENDPOINT]... "
                   "[--shift-to-now]\n";
      return 2;
    }
  }
  std::string err;
  auto in = analysis::load_csv(csv, topology, err);
  if (!in) {
    std::cerr << "np_replay: " << err << "\n";
    return 2;
  }
  if (shift && !in->events.empty()) {
    uint64_t last = 0;
    for (const auto& e : in->events) last = std::max(last, e.last_ns);
    const uint64_t by = unix_ns() - last;
    for (auto& e : in->events) {
      e.first_ns += by;
      e.last_ns += by;
    }
  }
  std::map<std::string, std::string> node_addr;
  for (const auto& [a, n] : in->addr_node) node_addr[n] = a;
  std::map<std::string, std::vector<analysis::FlowEvent>> by_node;
  for (auto& e : in->events) by_node[e.observer].push_back(std::move(e));
  zmq::context_t ctx;
  const uint64_t epoch = unix_ns();
  uint64_t batches = 0, records = 0;
  for (auto& [node, events] : by_node) {
    const std::string ep = route.count(node) ? route[node] : endpoint;
    if (node.empty() || ep.empty() || !node_addr.count(node)) {
      std::cerr << "np_replay: no route or address for node '" << node << "'\n";
      return 2;
    }
    TestSender s(ctx, ep);
    auto h = s.hello(node, epoch, {node_addr[node] + "/24"});
    if (!h || h->status != AckStatus::kHelloOk) {
      std::cerr << "np_replay: HELLO of " << node << " not accepted\n";
      return 1;
    }
    std::stable_sort(events.begin(), events.end(),
                     [](const auto& a, const auto& b) { return a.first_ns < b.first_ns; });
    for (std::size_t at = 0, seq = 0; at < events.size(); at += 64, ++seq) {
      Batch b;
      b.node = node;
      b.epoch = epoch;
      b.seq = seq;
      b.sent_ns = unix_ns();
      for (std::size_t i = at; i < std::min(events.size(), at + 64); ++i)
        b.flowlets.push_back(to_flowlet(events[i], node_addr[node]));
      auto a = s.batch(b);
      if (!a || a->status != AckStatus::kOk) {
        std::cerr << "np_replay: batch " << seq << " of " << node << " not stored\n";
        return 1;
      }
      batches++;
      records += b.flowlets.size();
    }
  }
  std::cout << nlohmann::json{{"batches", batches}, {"records", records}, {"epoch", epoch}}.dump() << "\n";
  return 0;
}
