#include "topology.hpp"

#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "netprism/addr.hpp"

namespace netprism::analysis {
namespace {

// A fabric line ("switch", "link", "path") into f; its switch names are checked once the whole file is read
// (a link may come before the switch line naming its end). False and the reason on a malformed line.
bool fabric_line(const std::string& word, std::istringstream& ss, Fabric& f,
                 std::vector<std::pair<int, std::string>>& named, int n, std::string& why) {
  std::vector<std::string> args;
  for (std::string a; ss >> a;) args.push_back(a);
  if (word == "switch") {
    if (args.empty() || args.size() > 2) return why = "expected 'switch NAME [ROLE]'", false;
    f.switches[args[0]] = args.size() > 1 ? args[1] : "";
  } else if (word == "link") {
    if (args.size() != 2 || args[0] == args[1])
      return why = "expected 'link A B' (two different names)", false;
    f.links.emplace_back(args[0], args[1]);
  } else {
    if (args.size() < 3 || args[0] == args[1]) return why = "expected 'path SRC DST SWITCH...'", false;
    std::vector<std::string> hops(args.begin() + 2, args.end());
    for (const auto& h : hops) named.emplace_back(n, h);
    f.paths[{args[0], args[1]}] = std::move(hops);
  }
  return true;
}

// Every switch a path names is declared, and every link has a switch at one end at least.
bool check_fabric(const Fabric& f, const std::vector<std::pair<int, std::string>>& named,
                  const std::string& path, std::string& err) {
  for (const auto& [n, name] : named)
    if (!f.switches.count(name)) {
      err =
          path + ":" + std::to_string(n) + ": '" + name + "' is not a switch (no 'switch " + name + "' line)";
      return false;
    }
  for (const auto& [a, b] : f.links)
    if (!f.switches.count(a) && !f.switches.count(b)) {
      err = path + ": link " + a + " " + b + ": neither end is a switch";
      return false;
    }
  return true;
}

}  // namespace

bool load_topology(const std::string& path, std::map<std::string, std::string>& addr_node, Fabric* fabric,
                   std::string& err) {
  std::ifstream f(path);
  if (!f) {
    err = path + ": cannot open topology file";
    return false;
  }
  Fabric fab;
  std::vector<std::pair<int, std::string>> named;  // (line, switch name) of path hops
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ss(line);
    std::string ip, node, extra;
    if (!(ss >> ip)) continue;
    if (ip == "switch" || ip == "link" || ip == "path") {
      std::string why;
      if (!fabric_line(ip, ss, fab, named, n, why)) {
        err = path + ":" + std::to_string(n) + ": " + why;
        return false;
      }
      continue;
    }
    if (!(ss >> node) || (ss >> extra)) {
      err = path + ":" + std::to_string(n) + ": expected 'IP NODE' (or a switch, link or path line)";
      return false;
    }
    auto a = parse_addr(ip);
    if (!a) {
      err = path + ":" + std::to_string(n) + ": '" + ip + "' is not an IP address";
      return false;
    }
    addr_node[format_addr(a->data())] = node;
  }
  if (!check_fabric(fab, named, path, err)) return false;
  if (fabric) *fabric = std::move(fab);
  return true;
}

}  // namespace netprism::analysis
