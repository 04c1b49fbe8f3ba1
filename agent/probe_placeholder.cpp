// Placeholder for the probe library until agent/probe/ is merged (see CMakeLists.txt): every entry point
// reports that the probe is not built, so the agent fails clearly instead of pretending to observe.
#include "probe/probe.hpp"

namespace netprism::agent {
struct Probe::Impl {};
Probe::Probe() = default;
Probe::~Probe() = default;
std::unique_ptr<Probe> Probe::open(const ProbeOptions&, std::string& err) {
  err = "this build has no kernel probe (agent/probe not merged yet)";
  return nullptr;
}
bool Probe::attach(const std::string&, AttachMode, std::string& err) {
  err = "no probe";
  return false;
}
void Probe::detach_all() {}
int Probe::ring_fd() const {
  return -1;
}
std::size_t Probe::poll(const FlowletSink&) {
  return 0;
}
std::size_t Probe::flush_idle(uint64_t, bool, const FlowletSink&) {
  return 0;
}
std::array<uint64_t, NP_CNT_MAX> Probe::counters() const {
  return {};
}
bool Probe::set_thresholds(uint64_t, uint64_t, std::string& err) {
  err = "no probe";
  return false;
}
uint64_t Probe::gap_ns() const {
  return 0;
}
}  // namespace netprism::agent
