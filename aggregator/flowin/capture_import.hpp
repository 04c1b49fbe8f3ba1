// `netprism analyze --format ipfix|sflow`: a capture of exporters' datagrams as the analysis' input.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analysis.hpp"
#include "flowin.hpp"

namespace netprism::flowin {

// Every datagram of the capture decoded (read_capture), each flowlet an event observed by its exporter's
// node; the topology file (if any) names the endpoints. Malformed datagrams and data without a template are
// reported in `warnings` (the rest is analysed); nullopt and err when nothing could be read.
std::optional<analysis::Input> load_capture(const std::string& path, Protocol p, const std::string& topology,
                                            std::vector<std::string>& warnings, std::string& err);

}  // namespace netprism::flowin
