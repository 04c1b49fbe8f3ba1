#include "topology.hpp"

#include <fstream>
#include <sstream>

#include "netprism/addr.hpp"

namespace netprism::analysis {

bool load_topology(const std::string& path, std::map<std::string, std::string>& addr_node, std::string& err) {
  std::ifstream f(path);
  if (!f) {
    err = path + ": cannot open topology file";
    return false;
  }
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ss(line);
    std::string ip, node, extra;
    if (!(ss >> ip)) continue;
    if (!(ss >> node) || (ss >> extra)) {
      err = path + ":" + std::to_string(n) + ": expected 'IP NODE'";
      return false;
    }
    auto a = parse_addr(ip);
    if (!a) {
      err = path + ":" + std::to_string(n) + ": '" + ip + "' is not an IP address";
      return false;
    }
    addr_node[format_addr(a->data())] = node;
  }
  return true;
}

}  // namespace netprism::analysis
