// netprism: the query CLI (foundation stub: --help/--version and the contract's option conventions).
#include <cstdlib>
#include <string>

#include "netprism/cli.hpp"

int main(int argc, char** argv) {
  CLI::App app{"netprism: query the netprism aggregator about training jobs", "netprism"};
  netprism::cli::standard_flags(app);
  const char* env = std::getenv("NETPRISM_AGGREGATOR");
  std::string endpoint = env && *env ? env : "tcp://127.0.0.1:7471";
  bool json = false;
  app.add_option("--aggregator", endpoint, "aggregator query endpoint");
  app.add_flag("--json", json, "print one JSON document");
  app.fallthrough();  // global options are accepted after the command too
  app.require_subcommand(0, 1);
  auto* status = app.add_subcommand("status", "agents and record counts");
  if (auto rc = netprism::cli::parse(app, argc, argv)) return *rc;
  if (status->parsed()) return netprism::cli::fail("netprism", "not implemented yet");
  return netprism::cli::fail("netprism", "no command given (see --help)");
}
