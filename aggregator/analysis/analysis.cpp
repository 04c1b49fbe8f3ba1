// Entry point of the analysis pipeline. Foundation version: no stage is implemented yet, so no job is
// reported (never a fabricated one); the analysis issue fills the stages in.
#include "analysis.hpp"

namespace netprism::analysis {

Result analyze(const Input&) {
  return {};
}

}  // namespace netprism::analysis

namespace netprism::analysis {

nlohmann::json perfetto(const Job& j) {
  return {{"traceEvents", nlohmann::json::array()}, {"job", j.id}};
}

std::optional<Input> load_csv(const std::string& path, const std::string&, std::string& err) {
  err = path + ": CSV import is not implemented yet";
  return std::nullopt;
}

}  // namespace netprism::analysis
