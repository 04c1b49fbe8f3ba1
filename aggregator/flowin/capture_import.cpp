#include "capture_import.hpp"

#include <algorithm>

#include "feed.hpp"
#include "topology.hpp"

namespace netprism::flowin {

std::optional<analysis::Input> load_capture(const std::string& path, Protocol p, const std::string& topology,
                                            std::vector<std::string>& warnings, std::string& err) {
  analysis::Input in;
  in.offline = true;
  if (!topology.empty() && !analysis::load_topology(topology, in.addr_node, &in.fabric, err))
    return std::nullopt;
  Stats st;
  auto by_node = read_capture(path, p, st, err);
  if (!by_node) return std::nullopt;
  if (!err.empty()) warnings.push_back(err + " (analysing what was read)");
  err.clear();
  for (const auto& [node, flowlets] : *by_node)
    for (const auto& f : flowlets) in.events.push_back(analysis::flow_event(node, f));
  // Exporters' records arrive in export order (a flow's record leaves at its timeout); the analysis reads
  // them in time order, as it reads a recording.
  std::stable_sort(in.events.begin(), in.events.end(),
                   [](const auto& a, const auto& b) { return a.first_ns < b.first_ns; });
  for (const auto& e : in.events) in.now_ns = std::max(in.now_ns, e.last_ns);
  if (st.errors > 0)
    warnings.push_back(path + ": " + std::to_string(st.errors) + " of " + std::to_string(st.datagrams) +
                       " datagrams malformed, skipped");
  if (st.no_template > 0)
    warnings.push_back(path + ": " + std::to_string(st.no_template) +
                       " data sets arrived before their template and were skipped");
  return in;
}

}  // namespace netprism::flowin
