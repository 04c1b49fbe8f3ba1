#include "html_report.hpp"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>

#include <fmt/format.h>

#include "netprism/cli.hpp"
#include "render.hpp"

namespace netprism::cli {

namespace {
using nlohmann::json;

// Chart geometry (SVG user units): wide enough for a few hundred iterations at ~2 units each.
constexpr double kW = 900, kH = 260, kLeft = 60, kRight = 20, kTop = 20, kBottom = 40;

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string text(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

double num(const json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_number() ? it->get<double>() : 0.0;
}

constexpr const char* kStyle = R"(body{font-family:sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0}td.l,th.l{text-align:left}h2{margin-top:2em;border-bottom:1px solid #ccc}
.hung{color:#b00;font-weight:bold}svg{background:#fafafa;border:1px solid #ddd}
.step{fill:none;stroke:#1f77b4;stroke-width:1.5}.median{stroke:#888;stroke-dasharray:5 4}
.finding{stroke:#d62728;stroke-width:1.5}.flabel{fill:#d62728;font-size:11px}.axis{font-size:11px;fill:#555}
.bar{fill:#1f77b4}.muted{color:#777})";

std::string fleet_summary(const json& report) {
  const json f = report.value("fleet", json::object());
  std::string out = "<h1>netprism fleet report</h1>\n<p class=\"muted\">as of " +
                    esc(format_time(static_cast<uint64_t>(num(report, "now_ns")))) + "</p>\n<table>\n";
  out +=
      "<tr><th>jobs</th><th>nodes</th><th>node-hours</th><th>node-hours lost</th><th>stragglers</th>"
      "<th>slow links</th><th>fabric elements</th><th>hangs</th></tr>\n";
  out += fmt::format(
      "<tr><td>{}</td><td>{}</td><td>{:.2f}</td><td>{:.2f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></"
      "tr>\n",
      num(f, "jobs"), num(f, "nodes"), num(f, "node_hours"), num(f, "node_hours_lost"), num(f, "stragglers"),
      num(f, "slow_links"), num(f, "fabric"), num(f, "hangs"));
  out +=
      "</table>\n<table>\n<tr><th class=\"l\">job</th><th class=\"l\">state</th><th>nodes</th>"
      "<th>iterations</th><th>median step (ms)</th><th>time lost</th></tr>\n";
  for (const auto& r : report.value("jobs", json::array())) {
    const std::string state = r.value("state", "");
    out += fmt::format(
        "<tr><td class=\"l\"><a href=\"#job-{0}\">{0}</a></td><td class=\"l{1}\">{2}</td><td>{3}</td>"
        "<td>{4}</td><td>{5:.1f}</td><td>{6:.1f} %</td></tr>\n",
        esc(r.value("id", "")), state == "hung" ? " hung" : "", esc(state),
        r.value("nodes", json::array()).size(), num(r, "iterations"), num(r, "median_step_ms"),
        100 * num(r, "time_lost_share"));
  }
  return out + "</table>\n";
}

// The step-time chart: duration per iteration, the median dashed, a red line at each finding's first
// iteration labelled with its kind and subject.
std::string step_chart(const json& timeline, const json& diagnose, double median_ms) {
  const json its = timeline.value("iterations", json::array());
  if (its.empty()) return "<p class=\"muted\">no iterations recognised yet</p>\n";
  double max_ms = median_ms;
  int lo = its.front().value("index", 0), hi = its.back().value("index", 0);
  for (const auto& it : its) max_ms = std::max(max_ms, num(it, "duration_ns") / 1e6);
  max_ms = max_ms > 0 ? max_ms * 1.1 : 1;
  const double span = std::max(1, hi - lo);
  auto x = [&](double i) { return kLeft + (i - lo) / span * (kW - kLeft - kRight); };
  auto y = [&](double ms) { return kTop + (1 - ms / max_ms) * (kH - kTop - kBottom); };
  std::string svg =
      fmt::format("<svg width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">\n", kW, kH, kW, kH);
  for (int k = 0; k <= 4; ++k) {  // y axis: 5 ticks
    const double ms = max_ms * k / 4;
    svg +=
        fmt::format("<text class=\"axis\" x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\">{:.0f} ms</text>\n",
                    kLeft - 6, y(ms) + 4, ms);
  }
  svg +=
      fmt::format("<text class=\"axis\" x=\"{:.0f}\" y=\"{:.0f}\">iteration {}</text>\n", kLeft, kH - 10, lo);
  svg += fmt::format("<text class=\"axis\" x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{}</text>\n",
                     kW - kRight, kH - 10, hi);
  svg += fmt::format("<line class=\"median\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>\n",
                     x(lo), x(hi), y(median_ms), y(median_ms));
  std::string pts;
  for (const auto& it : its)
    pts += fmt::format("{:.1f},{:.1f} ", x(it.value("index", 0)), y(num(it, "duration_ns") / 1e6));
  svg += "<polyline class=\"step\" points=\"" + pts + "\"/>\n";
  int n = 0;
  for (const auto& f : diagnose.value("findings", json::array())) {
    const double fx = x(std::clamp(f.value("first_iteration", lo), lo, hi));
    svg +=
        fmt::format("<line class=\"finding\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.0f}\" y2=\"{2:.0f}\"/>\n",
                    fx, kTop, kH - kBottom);
    // Labels right of their line, or left of it in the chart's right third (so they stay inside).
    const bool left = fx > kLeft + (kW - kLeft - kRight) * 2 / 3;
    svg += fmt::format("<text class=\"flabel\" x=\"{:.1f}\" y=\"{:.0f}\" text-anchor=\"{}\">{}</text>\n",
                       left ? fx - 3 : fx + 3, kTop + 12 + 13 * (n++ % 4), left ? "end" : "start",
                       esc(f.value("kind", "") + ": " + f.value("subject", "")));
  }
  return svg + "</svg>\n";
}

// Phases (compute, pipeline, dp_sync): their total time over every node and iteration, and its share.
std::string phase_table(const json& perfetto) {
  std::map<std::string, double> us;
  double total = 0;
  for (const auto& e : perfetto.value("traceEvents", json::array()))
    if (e.value("cat", "") == "phase") {
      us[e.value("name", "")] += num(e, "dur");
      total += num(e, "dur");
    }
  if (us.empty()) return "<p class=\"muted\">no phase breakdown (not computed for this job)</p>\n";
  std::string out =
      "<table>\n<tr><th class=\"l\">phase</th><th>node-seconds</th><th>share</th><th "
      "class=\"l\"></th></tr>\n";
  for (const auto& [name, v] : us)
    out += fmt::format(
        "<tr><td class=\"l\">{}</td><td>{:.2f}</td><td>{:.1f} %</td><td class=\"l\"><svg width=\"200\" "
        "height=\"10\"><rect class=\"bar\" width=\"{:.0f}\" height=\"10\"/></svg></td></tr>\n",
        esc(name), v / 1e6, 100 * v / total, 200 * v / total);
  return out + "</table>\n";
}

std::string findings_table(const json& diagnose) {
  const json fs = diagnose.value("findings", json::array());
  if (fs.empty()) return "<p>no findings</p>\n";
  std::string out =
      "<table>\n<tr><th class=\"l\">kind</th><th class=\"l\">subject</th><th>from iteration</th>"
      "<th>severity</th><th class=\"l\">evidence</th></tr>\n";
  for (const auto& f : fs)
    out += fmt::format(
        "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{:.2f}</td>"
        "<td class=\"l\">{}</td></tr>\n",
        esc(f.value("kind", "")), esc(f.value("subject", "")), text(f.value("first_iteration", json())),
        num(f, "severity"), esc(f.value("evidence", "")));
  return out + "</table>\n";
}
}  // namespace

std::string html_report(const json& report, const std::vector<HtmlJob>& jobs) {
  std::map<std::string, const HtmlJob*> by_id;
  for (const auto& j : jobs) by_id[j.timeline.value("job", "")] = &j;
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>netprism fleet report</title>\n<style>\n" +
      std::string(kStyle) + "\n</style>\n</head>\n<body>\n" + fleet_summary(report);
  for (const auto& r : report.value("jobs", json::array())) {
    const std::string id = r.value("id", "");
    out += "<h2 id=\"job-" + esc(id) + "\">job " + esc(id) + " <small class=\"muted\">" +
           esc(r.value("state", "")) + ", " + std::to_string(r.value("nodes", json::array()).size()) +
           " nodes</small></h2>\n";
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      out += "<p class=\"muted\">no timeline available</p>\n";
      continue;
    }
    out += "<h3>step time</h3>\n" +
           step_chart(it->second->timeline, it->second->diagnose, num(r, "median_step_ms"));
    out += "<h3>phases</h3>\n" + phase_table(it->second->perfetto);
    out += "<h3>findings</h3>\n" + findings_table(it->second->diagnose);
  }
  return out + "</body>\n</html>\n";
}

std::vector<HtmlJob> html_jobs(const std::vector<analysis::Job>& jobs) {
  std::vector<HtmlJob> out;
  for (const auto& j : jobs)
    out.push_back({analysis::timeline(j), analysis::diagnosis(j), analysis::perfetto(j)});
  return out;
}

std::optional<std::vector<HtmlJob>> fetch_html_jobs(const Client& client, const json& report,
                                                    CallError& err) {
  std::vector<HtmlJob> out;
  for (const auto& r : report.value("jobs", json::array())) {
    const std::string id = r.value("id", "");
    HtmlJob j;
    for (auto [cmd, doc] :
         {std::pair{"timeline", &j.timeline}, {"diagnose", &j.diagnose}, {"perfetto", &j.perfetto}}) {
      auto d = client.call({{"cmd", cmd}, {"id", id}}, err);
      if (!d) {
        if (err.kind == CallError::kNotFound) break;  // the job left the window since the report was made
        return std::nullopt;
      }
      *doc = std::move(*d);
    }
    if (!j.timeline.is_null()) out.push_back(std::move(j));
  }
  return out;
}

int write_html_report(const std::string& file, const json& report, const std::vector<HtmlJob>& jobs,
                      bool as_json) {
  std::ofstream f(file);
  f << html_report(report, jobs);
  f.close();
  if (!f) return fail("netprism", "cannot write " + file);
  const auto n = report.value("jobs", json::array()).size();
  std::cout << (as_json ? json{{"file", file}, {"jobs", n}}.dump() + "\n"
                        : "wrote " + file + " (" + std::to_string(n) + " jobs)\n");
  return kExitOk;
}

}  // namespace netprism::cli
