// Commands that work on recordings: `analyze` (no aggregator needed) and `record` (copy the aggregator's
// stored batches into a self-contained native recording file that `analyze --format native` reads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis.hpp"
#include "client.hpp"
#include "store.hpp"

namespace netprism::cli {

// Every stored flowlet but netprism's own traffic as analysis input, addresses mapped to nodes by the
// agents' HELLOs: the offline analysis of a data dir or a recording. Unreadable batches are warnings.
analysis::Input load_native(store::Store& s, std::vector<std::string>& warnings);

// Native input: a data dir (the aggregator's --data-dir) or a database file (a recording).
// format: "native", "csv" or "" (guess: a directory or SQLite file is native, anything else csv).
// Returns the `analyze` document, or nullopt with a one-line error.
std::optional<nlohmann::json> analyze_file(const std::string& input, std::string format,
                                           const std::string& topology, std::string& err);

// The `analyze` document of analysed jobs: {"jobs": [full job documents]}.
nlohmann::json jobs_document(const analysis::Result& r);

// The same, as analysed jobs plus the recording's "now" (its last event): for `report --input`.
struct Analysed {
  analysis::Result result;
  uint64_t now_ns = 0;
};
std::optional<Analysed> analyze_recording(const std::string& input, std::string format,
                                          const std::string& topology, std::string& err);

// Writes a recording; returns a small summary document, or nullopt with err set.
std::optional<nlohmann::json> record(const Client& client, const std::string& output, uint64_t since,
                                     uint64_t until, CallError& err);

}  // namespace netprism::cli
