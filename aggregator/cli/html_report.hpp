// `netprism report --html FILE`: the fleet report as one self-contained HTML page -- inline CSS and SVG, no
// scripts, no fetches -- that a browser opens from disk or a mail attachment. Per job: a step-time chart over
// the iterations (median dashed, findings marked at their first iteration), the phase breakdown, the
// findings; above them the fleet summary. Built from the CLI's own documents (report, timeline, diagnose,
// and the perfetto export for the phases), live or from a recording alike.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis.hpp"
#include "client.hpp"

namespace netprism::cli {

struct HtmlJob {
  nlohmann::json timeline;  // `timeline ID` document
  nlohmann::json diagnose;  // `diagnose ID` document
  nlohmann::json perfetto;  // `export ID --perfetto` document (its phase slices)
};

// report: the `report` document; jobs: in any order, matched to the report's rows by id.
std::string html_report(const nlohmann::json& report, const std::vector<HtmlJob>& jobs);

// The documents of analysed jobs (a recording), or fetched from the aggregator (nullopt and err on failure).
std::vector<HtmlJob> html_jobs(const std::vector<analysis::Job>& jobs);
std::optional<std::vector<HtmlJob>> fetch_html_jobs(const Client& client, const nlohmann::json& report,
                                                    CallError& err);

// Writes the page; prints what it wrote (one JSON document with as_json). Returns the exit code.
int write_html_report(const std::string& file, const nlohmann::json& report, const std::vector<HtmlJob>& jobs,
                      bool as_json);

}  // namespace netprism::cli
