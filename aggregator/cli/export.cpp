#include "export.hpp"

#include <fstream>
#include <iostream>

#include "netprism/cli.hpp"
#include "offline.hpp"

namespace netprism::cli {

nlohmann::json perfetto_all(const std::vector<analysis::Job>& jobs) {
  auto events = nlohmann::json::array();
  auto ids = nlohmann::json::array();
  int pid = 0;
  for (const auto& j : jobs) {
    ++pid;
    auto doc = analysis::perfetto(j);
    for (auto& e : doc["traceEvents"]) {
      e["pid"] = pid;
      events.push_back(std::move(e));
    }
    ids.push_back(j.id);
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", {{"jobs", ids}}}};
}

int analyze_to_perfetto(const std::string& input, const std::string& format, const std::string& topology,
                        const std::string& out, bool as_json, TimeRange range) {
  std::string err;
  auto r = analyze_recording(input, format, topology, err, range);
  if (!r) return fail("netprism", err);
  const auto doc = perfetto_all(r->result.jobs);
  std::ofstream f(out);
  f << doc.dump() << "\n";
  f.close();
  if (!f) return fail("netprism", "cannot write " + out);
  const auto events = doc["traceEvents"].size();
  nlohmann::json summary = {{"jobs", r->result.jobs.size()}, {"file", out}, {"events", events}};
  std::cout << (as_json ? summary.dump() + "\n"
                        : "wrote " + out + " (" + std::to_string(r->result.jobs.size()) + " jobs, " +
                              std::to_string(events) + " trace events)\n");
  return kExitOk;
}

}  // namespace netprism::cli
