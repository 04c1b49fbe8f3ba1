#include "shard.hpp"

#include <algorithm>
#include <cstdio>

#include "netprism/addr.hpp"

namespace netprism::clickhouse {

std::optional<Shard> parse_shard(const std::string& text, std::string& err) {
  Shard s;
  char slash = 0, extra = 0;
  if (std::sscanf(text.c_str(), "%u%c%u%c", &s.index, &slash, &s.count, &extra) != 3 || slash != '/' ||
      s.count == 0 || s.index >= s.count) {
    err = "--shard must be K/N with 0 <= K < N (got '" + text + "')";
    return std::nullopt;
  }
  return s;
}

std::optional<std::vector<std::string>> shard_nodes(const Reader& reader, uint64_t since, uint64_t until,
                                                    const std::map<std::string, std::string>& addr_node,
                                                    const Shard& shard, std::string& err,
                                                    std::vector<std::string>* all) {
  auto edges = reader.edges(since, until, err);
  if (!edges) return std::nullopt;
  std::map<std::string, std::string> parent;
  auto find = [&](std::string n) {
    while (parent.try_emplace(n, n).first->second != n) n = parent[n] = parent[parent[n]];
    return n;
  };
  auto join = [&](const std::string& a, const std::string& b) {
    auto ra = find(a), rb = find(b);
    if (ra != rb) parent[std::max(ra, rb)] = std::min(ra, rb);  // the root is the smallest name
  };
  for (const auto& e : *edges) {
    find(e.node);
    for (const auto* a : {&e.saddr, &e.daddr})
      if (auto it = addr_node.find(format_addr(a->data())); it != addr_node.end()) join(e.node, it->second);
  }
  std::vector<std::string> out;
  for (const auto& [node, _] : parent) {
    const std::string root = find(node);
    uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across builds and hosts, unlike std::hash
    for (unsigned char c : root) h = (h ^ c) * 1099511628211ull;
    if (h % shard.count == shard.index) out.push_back(node);
    if (all) all->push_back(node);
  }
  return out;
}

}  // namespace netprism::clickhouse
