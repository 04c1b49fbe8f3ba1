// The TOML config loader against both daemons' real schemas, and the agent's option checks after it.
#include <cstdint>
#include <set>
#include <string>

#include "netprism/config.hpp"
#include "options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace netprism;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto r = config::load_string(text, agent::agent_schema(), "fuzz.toml");
  if (!r) return 0;
  agent::AgentOptions o;
  if (agent::apply_config(r.values, {}, o).empty()) (void)agent::validate(o);
  return 0;
}
