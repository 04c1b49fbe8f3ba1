// netprism-agent: per-node probe loader and shipper (foundation stub: flags and config only).
#include <unistd.h>

#include <string>
#include <vector>

#include "netprism/cli.hpp"
#include "netprism/config.hpp"

int main(int argc, char** argv) {
  CLI::App app{"netprism-agent: watches a node's training traffic and ships flow records to the aggregator",
               "netprism-agent"};
  netprism::cli::standard_flags(app);
  std::string aggregator = "tcp://127.0.0.1:7470", node, mode = "tc", spool_dir = "/var/lib/netprism/spool";
  std::string rdma_sysfs = "/sys/class/infiniband", config_path;
  std::vector<std::string> ifaces;
  bool check = false;
  app.add_option("--aggregator", aggregator, "aggregator ingest endpoint");
  app.add_option("--node", node, "node name (default: host name)");
  app.add_option("--iface", ifaces, "interface to watch (repeatable)");
  app.add_option("--mode", mode, "attach mode")->check(CLI::IsMember({"tc", "xdp"}));
  app.add_option("--spool-dir", spool_dir, "where unacknowledged batches wait");
  app.add_option("--rdma-sysfs", rdma_sysfs, "RDMA sysfs root");
  app.add_option("--config", config_path, "TOML config file");
  app.add_flag("--check", check, "run the environment check only");
  if (auto rc = netprism::cli::parse(app, argc, argv)) return *rc;
  return netprism::cli::fail("netprism-agent", "not implemented yet");
}
