// Prometheus exposition (text format 0.0.4) of the aggregator's state, served at /metrics (http_api.hpp).
//
// Built from the same documents the CLI prints -- `status` (agents, ingest, store, analysis) and `report`
// (per-job median step and time lost) -- plus the analysed jobs themselves (last step, findings,
// parallelism), so a number on a dashboard is the number `netprism status`/`report` shows.
//
// Conventions (https://prometheus.io/docs/practices/naming/): base units in names (_seconds, _bytes, _ratio),
// counters end in _total, label sets are bounded: a job id, a node, a finding kind and subject (nodes and
// links of the fleet), an agent counter name (fixed by the agent's code). No per-flow labels. The job label
// is `job_id`, because Prometheus itself attaches `job` (the scrape job) to every series.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis.hpp"

namespace netprism::daemon {

// status: the query server's `status` result; report: its `report` result; jobs: the snapshot's jobs.
std::string render_metrics(const nlohmann::json& status, const nlohmann::json& report,
                           const std::vector<analysis::Job>& jobs);

}  // namespace netprism::daemon
