// Entry point of the analysis pipeline. Foundation version: no stage is implemented yet, so no job is
// reported (never a fabricated one); the analysis issue fills the stages in.
#include "analysis.hpp"

namespace netprism::analysis {

Result analyze(const Input&) {
  return {};
}

}  // namespace netprism::analysis
