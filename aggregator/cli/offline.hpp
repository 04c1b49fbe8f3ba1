// Commands that work on recordings: `analyze` (no aggregator needed) and `record` (copy the aggregator's
// stored batches into a self-contained native recording file that `analyze --format native` reads).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis.hpp"
#include "client.hpp"
#include "store.hpp"

namespace netprism::cli {

// Every stored flowlet but netprism's own traffic as analysis input, addresses mapped to nodes by the
// agents' HELLOs, and the RDMA counters (bursts, QP rows, table reads): the offline analysis of a data dir or
// a recording. Unreadable batches are warnings.
analysis::Input load_native(store::Store& s, std::vector<std::string>& warnings);
// Adds b's RDMA records (port bursts, QP table rows, the last table read) to in, as load_native() does.
void add_rdma(const Batch& b, analysis::Input& in);

// Records analysed: those overlapping [since, until] (Unix ns, both included), `analyze --since/--until`.
struct TimeRange {
  uint64_t since = 0;
  uint64_t until = std::numeric_limits<uint64_t>::max();
};

// Native input: a data dir (the aggregator's --data-dir) or a database file (a recording).
// format: "native", "csv" or "" (guess: a directory or SQLite file is native, anything else csv).
// Returns the `analyze` document, or nullopt with a one-line error.
std::optional<nlohmann::json> analyze_file(const std::string& input, std::string format,
                                           const std::string& topology, std::string& err,
                                           TimeRange range = {});

// The `analyze` document of analysed jobs: {"jobs": [full job documents]}.
nlohmann::json jobs_document(const analysis::Result& r);

// The same, as analysed jobs plus the recording's "now" (its last event): for `report --input`.
struct Analysed {
  analysis::Result result;
  uint64_t now_ns = 0;
};
std::optional<Analysed> analyze_recording(const std::string& input, std::string format,
                                          const std::string& topology, std::string& err,
                                          TimeRange range = {});

// A native recording streamed through analysis::StreamingAnalysis in time order, batch by batch, with a pass
// every kStreamPassNs of traffic (which lets it drop transfers older than every job's tail) and a last one
// as a recording's (Input::offline): memory bounded by the tails and one batch, not by the recording. The
// result is analyze()'s over load_native() (golden_outputs pins it). addr_node: the agents' HELLOs (plus a
// topology file).
// rdma_counters (optional): set when the recording holds RDMA port bursts (counters-only agents), which this
// streaming pass does not use; analyze_native() then analyses the recording through analyze()'s counters
// source.
Analysed stream_native(store::Store& s, const std::map<std::string, std::string>& addr_node, TimeRange range,
                       std::vector<std::string>& warnings, bool* rdma_counters = nullptr);
std::optional<Analysed> analyze_native(const std::string& input, const std::string& topology, TimeRange range,
                                       std::string& err);
// 60 s of traffic between passes: each pass re-reads every job's tail (at least 30 s, incremental.hpp), so
// the work is at most ~1.5x the traffic, while what the engine holds is at most a pass' traffic plus tails.
inline constexpr uint64_t kStreamPassNs = 60'000'000'000ull;

// Writes a recording; returns a small summary document, or nullopt with err set.
std::optional<nlohmann::json> record(const Client& client, const std::string& output, uint64_t since,
                                     uint64_t until, CallError& err);

}  // namespace netprism::cli
