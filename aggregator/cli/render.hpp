// Human-readable tables for every command's JSON document (the --json output is the document itself).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace netprism::cli {

// Unix-epoch ns as UTC ISO 8601 (ms); small values (imported simulator times) as seconds.
std::string format_time(uint64_t ns);
std::string render_status(const nlohmann::json& doc, uint64_t now_ns);
std::string render_flows(const nlohmann::json& doc);
std::string render_jobs(const nlohmann::json& doc);
std::string render_job(const nlohmann::json& doc);
std::string render_timeline(const nlohmann::json& doc);
std::string render_diagnosis(const nlohmann::json& doc);
// `report`: one row per job, then fleet totals.
std::string render_report(const nlohmann::json& doc);
// `analyze`: every job with its parallelism, timeline summary and findings.
std::string render_analysis(const nlohmann::json& doc);

}  // namespace netprism::cli
