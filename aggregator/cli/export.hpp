// `netprism analyze --input FILE --perfetto OUT`: the trace export of a recording, every job in one file.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis.hpp"
#include "offline.hpp"

namespace netprism::cli {

// One Chrome/Perfetto trace-event document for several jobs: each job's own export (analysis::perfetto), its
// events moved to a process of their own (pid = 1, 2, ... in job order) so the jobs show as separate groups.
nlohmann::json perfetto_all(const std::vector<analysis::Job>& jobs);

// Analyses the recording (as `analyze --input`), writes perfetto_all of its jobs to `out`, and prints what it
// wrote as `export` does (one JSON document with as_json). Returns the exit code.
int analyze_to_perfetto(const std::string& input, const std::string& format, const std::string& topology,
                        const std::string& out, bool as_json, TimeRange range = {});

}  // namespace netprism::cli
