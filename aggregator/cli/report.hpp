// `netprism report`: a fleet view, one row per job (nodes, hours observed, iterations, median step time, time
// lost, stragglers, slow links, hangs), in the spirit of the Acme characterisation of LLM training clusters.
// Computed from analysed jobs: by the aggregator for its live view (query "report") and by the CLI itself
// for a recording (`netprism report --input FILE`), so both print the same document.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis.hpp"

namespace netprism::cli {

// now_ns: the end of observation (live: the query time; a recording: its last event), which bounds how
// long a hung job has been hung.
nlohmann::json fleet_report(const std::vector<analysis::Job>& jobs, uint64_t now_ns);

}  // namespace netprism::cli
