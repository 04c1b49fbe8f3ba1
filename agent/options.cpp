#include "options.hpp"

namespace netprism::agent {

using config::Type;

config::Schema agent_schema() {
  return {
      {"aggregator", Type::kString},
      {"node", Type::kString},
      {"iface", Type::kStringList},
      {"mode", Type::kString},
      {"spool_dir", Type::kString},
      {"rdma_sysfs", Type::kString},
      {"key", Type::kString},
      {"server_pub", Type::kString},
      {"insecure", Type::kBool},
      {"batching.max_records", Type::kInteger},
      {"batching.flush_interval_ms", Type::kInteger},
      {"spool.max_bytes", Type::kInteger},
      {"spool.memory_max_bytes", Type::kInteger},
      {"delivery.window", Type::kInteger},
      {"delivery.ack_timeout_ms", Type::kInteger},
      {"delivery.hello_timeout_ms", Type::kInteger},
      {"delivery.heartbeat_ms", Type::kInteger},
      {"delivery.backoff_min_ms", Type::kInteger},
      {"delivery.backoff_max_ms", Type::kInteger},
      {"delivery.linger_ms", Type::kInteger},
      {"probe.gap_us", Type::kInteger},
      {"probe.max_burst_ms", Type::kInteger},
      {"probe.idle_flush_ms", Type::kInteger},
      {"probe.variant", Type::kString},
      {"rdma.enabled", Type::kBool},
      {"rdma.counters_only", Type::kBool},
      {"rdma.sample_interval_ms", Type::kInteger},
      {"rdma.ship_samples_ms", Type::kInteger},
      {"rdma.qp_refresh_ms", Type::kInteger},
      {"clock.recalibrate_ms", Type::kInteger},
      {"budget.cpu_percent", Type::kFloat},
      {"budget.max_records_per_sec", Type::kFloat},
  };
}

std::string apply_config(const config::Values& v, const std::set<std::string>& flags_given, AgentOptions& o) {
  auto str = [&](const char* key, std::string& dst) {
    if (flags_given.count(key)) return;
    if (auto x = config::get<std::string>(v, key)) dst = *x;
  };
  str("aggregator", o.aggregator);
  str("node", o.node);
  str("mode", o.mode);
  str("spool_dir", o.spool_dir);
  str("rdma_sysfs", o.rdma_sysfs);
  str("key", o.key_file);
  str("server_pub", o.server_pub_file);
  if (!flags_given.count("insecure"))
    if (auto x = config::get<bool>(v, "insecure")) o.insecure = *x;
  if (!flags_given.count("probe_variant"))
    if (auto x = config::get<std::string>(v, "probe.variant")) o.probe_variant = *x;
  if (!flags_given.count("iface"))
    if (auto x = config::get<std::vector<std::string>>(v, "iface")) o.ifaces = *x;

  std::string err;
  // Non-negative integers only; `scale` turns the file's unit into the internal one.
  auto num = [&](const char* key, uint64_t scale, auto& dst, bool allow_zero = false) {
    auto x = config::get<int64_t>(v, key);
    if (!x || !err.empty()) return;
    if (*x < 0 || (*x == 0 && !allow_zero)) {
      err = std::string("key '") + key + "' must be " + (allow_zero ? "non-negative" : "positive");
      return;
    }
    dst = static_cast<std::remove_reference_t<decltype(dst)>>(static_cast<uint64_t>(*x) * scale);
  };
  constexpr uint64_t ms = 1'000'000, us = 1'000;
  num("batching.max_records", 1, o.batching.max_records);
  num("batching.flush_interval_ms", ms, o.batching.flush_interval_ns);
  num("spool.max_bytes", 1, o.spool_max_bytes);
  num("spool.memory_max_bytes", 1, o.delivery.mem_max_bytes);
  num("delivery.window", 1, o.delivery.window);
  num("delivery.ack_timeout_ms", ms, o.delivery.ack_timeout_ns);
  num("delivery.hello_timeout_ms", ms, o.delivery.hello_timeout_ns);
  num("delivery.heartbeat_ms", ms, o.delivery.heartbeat_ns);
  num("delivery.backoff_min_ms", ms, o.delivery.backoff_min_ns);
  num("delivery.backoff_max_ms", ms, o.delivery.backoff_max_ns);
  num("delivery.linger_ms", ms, o.linger_ns, true);
  num("probe.gap_us", us, o.probe_gap_ns);
  num("probe.max_burst_ms", ms, o.probe_max_burst_ns);
  num("probe.idle_flush_ms", ms, o.idle_flush_ns);
  if (auto x = config::get<bool>(v, "rdma.enabled")) o.rdma_enabled = *x;
  if (auto x = config::get<bool>(v, "rdma.counters_only"); x && !flags_given.count("rdma_counters_only"))
    o.rdma_counters_only = *x;
  num("rdma.sample_interval_ms", ms, o.rdma_sample_ns);
  num("rdma.ship_samples_ms", ms, o.rdma_ship_samples_ns);
  num("rdma.qp_refresh_ms", ms, o.rdma_qp_refresh_ns);
  num("clock.recalibrate_ms", ms, o.clock_recalibrate_ns);
  for (const char* key : {"budget.cpu_percent", "budget.max_records_per_sec"}) {
    if (auto x = config::get<double>(v, key)) {
      if (!(*x > 0)) return std::string("key '") + key + "' must be positive";
      (std::string(key) == "budget.cpu_percent" ? o.budget.cpu_percent : o.budget.max_records_per_sec) = *x;
    }
  }
  return err;
}

std::string validate(const AgentOptions& o) {
  if (o.mode != "tc" && o.mode != "xdp") return "mode must be tc or xdp, not '" + o.mode + "'";
  if (o.aggregator.empty()) return "aggregator endpoint is empty";
  if (o.probe_variant != "auto" && o.probe_variant != "modern" && o.probe_variant != "compat")
    return "probe variant must be auto, modern or compat, not '" + o.probe_variant + "'";
  if (o.spool_dir.empty()) return "spool_dir is empty";
  if (o.delivery.backoff_min_ns > o.delivery.backoff_max_ns)
    return "delivery.backoff_min_ms is larger than delivery.backoff_max_ms";
  if (o.batching.max_records > (1u << 20)) return "batching.max_records is above the wire limit of 1048576";
  return "";
}

std::string load_keys(AgentOptions& o) {
  if (o.insecure) return "";
  return keys::load_client(o.key_file, o.server_pub_file, o.delivery.curve);
}

}  // namespace netprism::agent
