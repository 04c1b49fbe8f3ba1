// The topology file (docs/formats.md): "IP NODE" lines naming the node an address belongs to; '#' starts a
// comment. Read once, here, for every input: `netprism analyze --topology` (CSV, native, captures) and
// `netprism-aggregator --topology`.
#pragma once

#include <map>
#include <string>

namespace netprism::analysis {

// Adds the file's mappings to addr_node (addresses in canonical text form). False and a one-line reason
// naming the file and line on bad input.
bool load_topology(const std::string& path, std::map<std::string, std::string>& addr_node, std::string& err);

}  // namespace netprism::analysis
