// The topology file (docs/formats.md): "IP NODE" lines naming the node an address belongs to, and the
// fabric's lines ("switch NAME [ROLE]", "link A B", "path SRC DST SWITCH..."); '#' starts a comment. Read
// once, here, for every input: `netprism analyze --topology` (CSV, native, captures) and
// `netprism-aggregator --topology`.
#pragma once

#include <map>
#include <string>

#include "analysis.hpp"

namespace netprism::analysis {

// Adds the file's mappings to addr_node (addresses in canonical text form) and its switch, link and path
// lines to fabric (when not null; without it they are checked and ignored). False and a one-line reason
// naming the file and line on bad input.
bool load_topology(const std::string& path, std::map<std::string, std::string>& addr_node, Fabric* fabric,
                   std::string& err);
inline bool load_topology(const std::string& path, std::map<std::string, std::string>& addr_node,
                          std::string& err) {
  return load_topology(path, addr_node, nullptr, err);
}

}  // namespace netprism::analysis
