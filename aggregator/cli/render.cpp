#include "render.hpp"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

namespace netprism::cli {

namespace {
using json = nlohmann::json;

// Column-aligned table: widths from the content, two spaces between columns.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str() const {
    std::vector<std::size_t> w;
    for (const auto& r : rows_)
      for (std::size_t i = 0; i < r.size(); ++i) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], r[i].size());
      }
    std::string out;
    for (const auto& r : rows_) {
      std::string line;
      for (std::size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
      }
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// A member by reference (an empty array/object when absent): avoids iterating temporaries.
const json& arr(const json& j, const char* k) {
  static const json empty = json::array();
  auto it = j.find(k);
  return it != j.end() && it->is_array() ? *it : empty;
}
const json& obj(const json& j, const char* k) {
  static const json empty = json::object();
  auto it = j.find(k);
  return it != j.end() && it->is_object() ? *it : empty;
}

std::string u(const json& j, const char* k) {
  auto it = j.find(k);
  if (it == j.end() || it->is_null()) return "-";
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}
uint64_t un(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}
std::string fixed(double v, int prec) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}
std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    ++i;
  }
  return i == 0 ? std::to_string(b) + " B" : fixed(v, 1) + " " + units[i];
}
std::string join(const json& arr, const char* sep = ",") {
  std::string out;
  if (!arr.is_array()) return out;
  for (const auto& e : arr) {
    if (!out.empty()) out += sep;
    out += e.is_string() ? e.get<std::string>() : e.dump();
  }
  return out;
}
std::string groups(const json& arr) {
  std::string out;
  if (!arr.is_array()) return "-";
  for (const auto& g : arr) out += (out.empty() ? "[" : " [") + join(g, " ") + "]";
  return out.empty() ? "-" : out;
}
}  // namespace

std::string format_time(uint64_t ns) {
  // Before 1980 it cannot be a wall-clock time: an imported trace starting near 0; show seconds.
  if (ns < 315532800ull * 1000000000ull) return fixed(static_cast<double>(ns) / 1e9, 6) + "s";
  time_t secs = static_cast<time_t>(ns / 1000000000ull);
  tm t{};
  gmtime_r(&secs, &t);
  char b[40];
  strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &t);
  char out[64];
  std::snprintf(out, sizeof out, "%s.%03uZ", b, static_cast<unsigned>((ns / 1000000ull) % 1000));
  return out;
}

std::string render_status(const json& doc, uint64_t now_ns) {
  Table t({"NODE", "CONNECTED", "LAST SEEN", "RECORDS", "EPOCH", "CLOCK", "OFFSET(ms)", "AGENT COUNTERS"});
  for (const auto& a : arr(doc, "agents")) {
    uint64_t last = un(a, "last_seen_ns");
    std::string ago = last == 0 ? "never" : last > now_ns ? "now" : fixed((now_ns - last) / 1e9, 1) + "s ago";
    const auto& c = obj(a, "clock");
    std::string clock =
        c.value("source", std::string("?")) + (c.value("synced", false) ? " synced" : " unsynced");
    std::string off = a.contains("clock_offset_ns") && a["clock_offset_ns"].is_number_integer()
                          ? fixed(a["clock_offset_ns"].get<int64_t>() / 1e6, 3)
                          : "-";
    std::string counters;
    for (auto& [k, v] : obj(a, "counters").items())
      counters += (counters.empty() ? "" : " ") + k + "=" + v.dump();
    t.add({u(a, "node"), a.value("connected", false) ? "yes" : "no", ago, u(a, "records"), u(a, "epoch"),
           clock, off, counters.empty() ? "-" : counters});
  }
  std::string out = t.str();
  out += "records total: " + u(doc, "records_total") + "\n";
  if (auto in = doc.find("ingest"); in != doc.end()) {
    out += "ingest: " + u(*in, "batches_stored") + " batches stored, " + u(*in, "duplicates") +
           " duplicates, " + u(*in, "unknown_node") + " unknown-node, " + u(*in, "rejected") + " rejected\n";
    for (auto& [k, v] : obj(*in, "rejected_by_reason").items())
      out += "  rejected: " + v.dump() + " x " + k + "\n";
  }
  if (auto an = doc.find("analysis"); an != doc.end())
    out += "analysis: " + u(*an, "jobs") + " jobs, " + u(*an, "window_events") +
           " events in window, last run " +
           (un(*an, "last_run_ns") ? format_time(un(*an, "last_run_ns")) : std::string("never")) + "\n";
  if (auto an = doc.find("analysis"); an != doc.end() && un(*an, "dropped_events")) {
    // Why the live view shed work (the store still has everything), by cause.
    out += "analysis: " + u(*an, "dropped_events") + " events dropped";
    std::string sep = " (";
    for (auto& [k, v] : obj(*an, "dropped_by_cause").items())
      if (v.is_number() && v.get<double>() > 0) {
        out += sep + k + " " + v.dump();
        sep = ", ";
      }
    out += sep == ", " ? ")\n" : "\n";
  }
  if (auto st = doc.find("store"); st != doc.end()) {
    out += "store: " + u(*st, "batches") + " batches, " + human_bytes(un(*st, "compressed_bytes")) +
           " compressed\n";
    if (st->value("commit_failing", false))
      out += "store: COMMITS FAILING since " + format_time(un(*st, "failing_since_ns")) + " (" +
             u(*st, "failing_commits") + " in a row): " + st->value("last_error", std::string("?")) +
             "; nothing is acknowledged meanwhile, the agents keep their batches\n";
  }
  if (auto ch = doc.find("clickhouse"); ch != doc.end()) {  // --clickhouse (docs/clickhouse.md)
    out += "clickhouse: " + u(*ch, "sunk_batches") + " batches (" + u(*ch, "sunk_rows") + " rows) copied, " +
           u(*ch, "pending_batches") + " pending, " + u(*ch, "errors") + " errors\n";
    if (const auto e = ch->value("last_error", std::string()); !e.empty())
      out += "clickhouse: FAILING: " + e + "; retrying, the store keeps the batches meanwhile\n";
  }
  return out;
}

std::string render_flows(const json& doc) {
  Table t({"NODE", "SRC", "SPORT", "DST", "DPORT", "PROTO", "QPN", "BYTES", "PAYLOAD", "PACKETS", "FIRST",
           "LAST"});
  const auto& flows = arr(doc, "flows");
  for (const auto& f : flows)
    t.add({u(f, "node"), u(f, "src"), u(f, "src_port"), u(f, "dst"), u(f, "dst_port"), u(f, "proto"),
           u(f, "qpn"), u(f, "bytes"), u(f, "payload_bytes"), u(f, "packets"), format_time(un(f, "first_ns")),
           format_time(un(f, "last_ns"))});
  std::string out = t.str();
  out += std::to_string(flows.size()) + " flows";
  if (doc.value("truncated", false))
    out += " (limited; " + u(doc, "total_flows") + " in range, largest first)";
  return out + "\n";
}

std::string render_jobs(const json& doc) {
  Table t({"JOB", "STATE", "NODES", "ITERATIONS", "STEP(ms)"});
  const auto& jobs = arr(doc, "jobs");
  for (const auto& j : jobs) {
    double step = j.value("step_time_ms", 0.0);
    std::string its = j.contains("iterations") && j["iterations"].is_array()
                          ? std::to_string(j["iterations"].size())
                          : u(j, "iterations");
    // Large jobs: the first few nodes and a count keep the table readable (`job ID` lists them all).
    const auto& nodes = arr(j, "nodes");
    std::string shown;
    if (nodes.size() <= 6) {
      shown = join(nodes);
    } else {
      for (std::size_t i = 0; i < 3; ++i) shown += (i ? "," : "") + nodes[i].get<std::string>();
      shown += ",... (" + std::to_string(nodes.size()) + " nodes)";
    }
    t.add({u(j, "id"), u(j, "state"), shown, its, fixed(step, 1)});
  }
  if (jobs.empty()) return "no jobs recognised yet\n";
  return t.str();
}

std::string render_job(const json& doc) {
  const auto& p = obj(doc, "parallelism");
  std::string out = "job " + u(doc, "id") + "\n";
  if (doc.contains("state")) out += "  state:     " + u(doc, "state") + "\n";
  out += "  nodes:     " + join(arr(doc, "nodes"), " ") + "\n";
  out += "  dp:        " + u(p, "dp") + "\n";
  out += "  pp:        " + u(p, "pp") + "\n";
  out += "  dp groups: " + groups(arr(p, "dp_groups")) + "\n";
  out += "  stages:    " + groups(arr(p, "stages")) + "\n";
  return out;
}

std::string render_timeline(const json& doc) {
  Table t({"ITER", "START", "END", "DURATION(ms)"});
  const auto& its = arr(doc, "iterations");
  for (const auto& i : its)
    t.add({u(i, "index"), format_time(un(i, "start_ns")), format_time(un(i, "end_ns")),
           fixed(un(i, "duration_ns") / 1e6, 3)});
  std::string out = "job " + u(doc, "job") + ": " + std::to_string(its.size()) + " iterations\n";
  return its.empty() ? out : out + t.str();
}

std::string render_diagnosis(const json& doc) {
  const auto& fs = arr(doc, "findings");
  std::string out = "job " + u(doc, "job") + ": ";
  if (fs.empty()) return out + "no findings\n";
  out += std::to_string(fs.size()) + " findings\n";
  Table t({"KIND", "SUBJECT", "FROM ITER", "START", "SEVERITY", "EVIDENCE"});
  for (const auto& f : fs)
    t.add({u(f, "kind"), u(f, "subject"), u(f, "first_iteration"), format_time(un(f, "start_ns")),
           fixed(f.value("severity", 0.0), 2), u(f, "evidence")});
  return out + t.str();
}

std::string render_report(const json& doc) {
  const auto& jobs = arr(doc, "jobs");
  if (jobs.empty()) return "no jobs recognised yet\n";
  // Seconds, minutes or hours, whichever reads best: test jobs last seconds, production ones days.
  auto span = [](double h) {
    return h < 1.0 / 60 ? fixed(h * 3600, 1) + " s" : h < 1 ? fixed(h * 60, 1) + " min" : fixed(h, 2) + " h";
  };
  Table t({"JOB", "STATE", "NODES", "OBSERVED", "ITERS", "MEDIAN STEP(ms)", "LOST(s)", "LOST%", "SLOW ITERS",
           "STRAGGLERS", "SLOW LINKS", "FABRIC", "HANG"});
  for (const auto& j : jobs) {
    const auto& lost = obj(j, "time_lost_s");
    auto list = [&](const char* k) { return arr(j, k).empty() ? std::string("-") : join(arr(j, k), " "); };
    t.add({u(j, "id"), u(j, "state"), std::to_string(arr(j, "nodes").size()),
           span(j.value("hours_observed", 0.0)), u(j, "iterations"), fixed(j.value("median_step_ms", 0.0), 1),
           fixed(lost.value("total", 0.0), 2), fixed(100 * j.value("time_lost_share", 0.0), 1),
           u(j, "slow_iterations"), list("stragglers"), list("slow_links"), list("fabric"), list("hangs")});
  }
  const auto& f = obj(doc, "fleet");
  std::string out = t.str();
  out += "fleet: " + u(f, "jobs") + " jobs on " + u(f, "nodes") + " nodes, " +
         fixed(f.value("node_hours", 0.0), 3) + " node-hours observed, " +
         fixed(f.value("node_hours_lost", 0.0), 3) + " lost; " + u(f, "stragglers") + " stragglers, " +
         u(f, "slow_links") + " slow links, " + u(f, "fabric") + " fabric elements, " + u(f, "hangs") +
         " hangs\n";
  out +=
      "time lost = slow iterations' excess over the median step + (step - what-if step) for iterations a "
      "straggler or slow link affects + time hung\n";
  return out;
}

std::string render_analysis(const json& doc) {
  const auto& jobs = arr(doc, "jobs");
  if (jobs.empty()) return "no jobs recognised\n";
  std::string out;
  for (const auto& j : jobs) {
    out += render_job(j);
    out += "  step time: " + fixed(j.value("step_time_ms", 0.0), 1) + " ms\n";
    out += render_timeline({{"job", j.value("id", "")}, {"iterations", arr(j, "iterations")}});
    out += render_diagnosis({{"job", j.value("id", "")}, {"findings", arr(j, "findings")}});
    out += "\n";
  }
  return out;
}

}  // namespace netprism::cli
