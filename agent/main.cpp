// netprism-agent: loads the probe on the node's interfaces, reads RDMA state, and ships flow records to the
// aggregator with no loss. Flags override the TOML config file (/etc/netprism/agent.toml when it exists).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "agent.hpp"
#include "check.hpp"
#include "netprism/cli.hpp"
#include "netprism/config.hpp"
#include "options.hpp"
#include "probe/features.hpp"

namespace {

// The kernel side of --check: every missing kernel feature the probe needs (problems) or works around
// (notes, with what the workaround costs), and the variant the agent would load.
std::vector<std::string> check_probe(const std::string& requested_name, std::vector<std::string>& notes) {
  using namespace netprism::agent;
  const ProbeVariant requested = parse_variant(requested_name).value_or(ProbeVariant::kAuto);
  const KernelFeatures f = detect_kernel_features();
  FeatureReport r = report_features(f);
  VariantChoice c = choose_variant(f, requested);
  std::vector<std::string> problems = r.fatal;
  if (!c.error.empty()) problems.push_back(c.error);
  notes = r.degraded;
  notes.insert(notes.begin(), describe_choice(f, requested, c.variant));
  return problems;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace netprism;
  // SIGINT/SIGTERM are taken through a signalfd by the agent loop; blocking them first thing means one that
  // arrives during start-up is held until the loop can shut down cleanly (nothing attached is left behind).
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  CLI::App app{"netprism-agent: watches a node's training traffic and ships flow records to the aggregator",
               "netprism-agent"};
  cli::standard_flags(app);
  agent::AgentOptions o;
  std::string config_path;
  bool check = false;
  app.add_option("--aggregator", o.aggregator, "aggregator ingest endpoint (default tcp://127.0.0.1:7470)");
  app.add_option("--node", o.node, "node name (default: host name)");
  app.add_option("--iface", o.ifaces, "interface to watch (repeatable)");
  app.add_option("--mode", o.mode, "attach mode: tc (ingress+egress, default) or xdp (ingress)")
      ->check(CLI::IsMember({"tc", "xdp"}));
  app.add_option(
         "--probe-variant", o.probe_variant,
         "probe program variant: auto (default: from the kernel's features), modern (5.18+) or compat "
         "(5.13+, no bpf_loop or __sk_buff.tstamp_type)")
      ->check(CLI::IsMember({"auto", "modern", "compat"}));
  app.add_option("--spool-dir", o.spool_dir,
                 "where unacknowledged batches wait (default /var/lib/netprism/agent/spool)");
  app.add_option("--rdma-sysfs", o.rdma_sysfs, "RDMA sysfs root (default /sys/class/infiniband)");
  app.add_flag("--rdma-counters-only", o.rdma_counters_only,
               "RDMA seen through port counters and the QP table only, as on NICs whose RoCE bypasses tc/XDP "
               "(RoCE flowlets of the probe dropped; TCP/UDP still watched)");
  app.add_option("--key", o.key_file, "this agent's CURVE secret key file (netprism keygen)");
  app.add_option("--server-pub", o.server_pub_file, "the aggregator's CURVE public key file");
  app.add_flag("--insecure", o.insecure, "plain TCP without CURVE (an aggregator run with insecure = true)");
  app.add_option("--config", config_path, "TOML config file (default /etc/netprism/agent.toml if it exists)");
  app.add_flag("--check", check,
               "run the start-up environment check only; exit 0 if the agent could run, else 2");
  if (auto rc = cli::parse(app, argc, argv)) return *rc;

  const std::string prog = "netprism-agent";
  bool explicit_config = !config_path.empty();
  if (!explicit_config && std::filesystem::exists("/etc/netprism/agent.toml"))
    config_path = "/etc/netprism/agent.toml";
  if (!config_path.empty()) {
    auto loaded = config::load_file(config_path, agent::agent_schema());
    if (!loaded) return cli::fail(prog, loaded.error);
    std::set<std::string> given;
    for (const char* f : {"aggregator", "node", "iface", "mode", "spool-dir", "rdma-sysfs", "key",
                          "server-pub", "insecure", "probe-variant", "rdma-counters-only"})
      if (app.count(std::string("--") + f)) {
        std::string k = f;
        for (auto& ch : k)
          if (ch == '-') ch = '_';
        given.insert(k);
      }
    if (auto e = agent::apply_config(loaded.values, given, o); !e.empty())
      return cli::fail(prog, config_path + ": " + e);
  }
  // The packaged agent.toml ships the endpoint empty: say what to set, and exit as a usage error (its unit
  // does not restart on 2, so an unconfigured node neither loops nor spools towards nowhere).
  if (o.aggregator.empty()) {
    std::cerr << prog << ": no aggregator configured: set aggregator = \"tcp://AGGREGATOR-HOST:7470\" in "
              << (config_path.empty() ? std::string("/etc/netprism/agent.toml") : config_path)
              << " or pass --aggregator\n";
    return cli::kExitUsage;
  }
  if (auto e = agent::validate(o); !e.empty()) return cli::fail(prog, e);

  agent::CheckInput ci;
  ci.ifaces = o.ifaces;
  ci.spool_dir = o.spool_dir;
  ci.aggregator = o.aggregator;
  auto problems = agent::check_environment(ci);
  if (auto e = agent::load_keys(o); !e.empty()) problems.push_back(e);
  std::vector<std::string> notes;
  if (check) {
    auto kernel = check_probe(o.probe_variant, notes);
    problems.insert(problems.end(), kernel.begin(), kernel.end());
  }
  for (const auto& p : problems) std::cerr << prog << ": " << p << "\n";
  if (check) {
    if (problems.empty()) {
      std::cout << prog << ": environment ok: BTF present, capabilities present, " << o.ifaces.size()
                << " interface(s) found, spool directory writable\n";
      for (const auto& n : notes) std::cout << prog << ": " << n << "\n";
    }
    return problems.empty() ? cli::kExitOk : cli::kExitUsage;
  }
  if (!problems.empty()) return cli::kExitUsage;
  if (o.insecure)
    std::cerr << prog
              << ": WARNING: insecure: records go to the aggregator over plain TCP, unauthenticated\n";
  return agent::run_agent(o);
}
