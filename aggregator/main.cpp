// netprism-aggregator: central ingest, storage and analysis daemon (foundation stub: flags only).
#include <string>

#include "netprism/cli.hpp"

int main(int argc, char** argv) {
  CLI::App app{"netprism-aggregator: stores agents' flow records and analyses training jobs",
               "netprism-aggregator"};
  netprism::cli::standard_flags(app);
  std::string listen = "tcp://0.0.0.0:7470", query = "tcp://127.0.0.1:7471", data_dir, config_path;
  app.add_option("--listen", listen, "agent ingest endpoint");
  app.add_option("--query", query, "query endpoint for the netprism CLI");
  app.add_option("--data-dir", data_dir, "where the embedded store lives");
  app.add_option("--config", config_path, "TOML config file");
  if (auto rc = netprism::cli::parse(app, argc, argv)) return *rc;
  return netprism::cli::fail("netprism-aggregator", "not implemented yet");
}
