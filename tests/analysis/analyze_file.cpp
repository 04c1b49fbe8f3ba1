// Test driver: the analysis pipeline over a flow CSV, printing the `netprism analyze --json` document.
// Lets the analysis tests (and the testbed's scorer, via --json FILE) run without the CLI or an aggregator.
//   analyze_file FLOWS.csv [TOPOLOGY] [--now NS]
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "analysis.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: analyze_file FLOWS.csv [TOPOLOGY] [--now NS]\n";
    return 2;
  }
  std::string topo;
  uint64_t now = 0;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--now" && i + 1 < argc)
      now = std::strtoull(argv[++i], nullptr, 10);
    else
      topo = a;
  }
  std::string err;
  auto in = netprism::analysis::load_csv(argv[1], topo, err);
  if (!in) {
    std::cerr << "analyze_file: " << err << "\n";
    return 1;
  }
  if (now) in->now_ns = now;
  auto r = netprism::analysis::analyze(*in);
  nlohmann::json out = {{"jobs", nlohmann::json::array()}};
  for (const auto& j : r.jobs) out["jobs"].push_back(netprism::analysis::full(j));
  std::cout << out.dump(1) << "\n";
  return 0;
}
