// netprism-aggregator: central ingest, storage and analysis daemon.
// Threads: ingest (ROUTER, the store's only batch writer) -- or, in the analysis role, a reader of ClickHouse
// (--analyze-from-clickhouse) --, live analysis, query endpoint (REP), and optional ones.
// SIGINT/SIGTERM stop them in order; every socket has a finite linger so shutdown cannot hang.
#include <malloc.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "daemon/auth.hpp"
#include "daemon/clickhouse_analyzer.hpp"
#include "daemon/clickhouse_sink.hpp"
#include "daemon/http_api.hpp"
#include "daemon/ingest.hpp"
#include "daemon/live_analysis.hpp"
#include "daemon/log.hpp"
#include "daemon/query_server.hpp"
#include "daemon/registry.hpp"
#include "daemon/settings.hpp"
#include "flowin/listener.hpp"
#include "analysis/topology.hpp"
#include "daemon/systemd.hpp"
#include "daemon/webhooks.hpp"
#include "netprism/cli.hpp"
#include "netprism/version.hpp"

using namespace netprism;

namespace {

// The stop signals, and SIGHUP (re-reads the allowlists, daemon/auth.hpp), blocked in every thread; the main
// thread waits for them.
sigset_t block_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  return sigs;
}

// One daemon per data dir: a second one would interleave its own duplicate bookkeeping with ours. The lock
// is released by the kernel when this process ends, however it ends (kill -9 included). "" when locked.
std::string lock_data_dir(const daemon::Settings& s) {
  std::error_code ec;
  std::filesystem::create_directories(s.data_dir, ec);
  if (ec) return "cannot create data dir " + s.data_dir + ": " + ec.message();
  std::string lock_path = s.data_dir + "/aggregator.lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);  // held until exit
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
    return "data dir " + s.data_dir + " is in use by another netprism-aggregator (" + std::strerror(errno) +
           ")";
  return "";
}

// Ports of netprism's own traffic (ingest, queries, exporters' datagrams to us): not a job's.
store::OwnTraffic own_ports(const daemon::Settings& s) {
  store::OwnTraffic own;
  for (const auto& ep : {s.listen, s.query})
    if (auto p = store::endpoint_port(ep)) own.ports.insert(*p);
  for (const auto& url : s.flow_listen)
    if (std::string e; auto l = flowin::parse_listen(url, e)) own.ports.insert(l->port);
  return own;
}

// The store at start: registrations and counters into the registry; own ports of earlier runs stay excluded
// too (their traffic may still be in the window).
void boot_store(const daemon::Settings& s, daemon::Registry& reg, store::OwnTraffic& own) {
  store::Store boot(s.data_dir, store::Db::Mode::kReadWrite, static_cast<int>(s.zstd_level));
  for (auto p : store::own_traffic(boot).ports) own.ports.insert(p);
  store::save_own_traffic(boot, own);
  auto nodes = boot.nodes();
  reg.load(nodes, boot.epochs());
  uint64_t batches = boot.batch_count(), bytes = boot.stored_bytes();
  reg.with_counters([&](daemon::IngestCounters& c) {
    c.store_batches = batches;
    c.store_bytes = bytes;
  });
  daemon::log_line("store " + store::Store::resolve(s.data_dir) + ": " + std::to_string(nodes.size()) +
                   " registered nodes, " + std::to_string(batches) + " batches");
}

void reload_allowlists(daemon::Auth& auth) {
  auto err = auth.reload();
  daemon::log_line(err.empty() ? "SIGHUP: allowlists reloaded: " + std::to_string(auth.agents()) +
                                     " agent key(s), " + std::to_string(auth.clients()) + " client key(s)"
                               : "SIGHUP: allowlists not reloaded (the old ones stay in force): " + err);
}

// Every part of the daemon, its threads, until a stop signal; 0, or what the error path returns.
int serve(const daemon::Settings& s, const sigset_t& sigs) {
  // Two I/O threads: CURVE decryption happens there, and with one a flood of large messages from a few
  // keyed peers queued every other connection's messages behind its decryption (the exhaustion test); libzmq
  // gives each new connection the least loaded thread.
  zmq::context_t ctx(2);
  store::OwnTraffic own = own_ports(s);
  daemon::Registry reg;
  boot_store(s, reg, own);
  // The topology file names addresses no agent reports (switch exporters' flows); it overrides HELLOs.
  std::map<std::string, std::string> topology;
  analysis::Fabric fabric;
  if (std::string err; !s.topology.empty() && !analysis::load_topology(s.topology, topology, &fabric, err))
    return cli::fail("netprism-aggregator", err);
  // The analysis role (--analyze-from-clickhouse) ingests nothing: its names come from ClickHouse.
  const bool analyzer = !s.clickhouse_analyze_from.empty();
  daemon::ClickHouseAnalyzer::Names ch_names;
  daemon::LiveAnalysis live(s, own, [&reg, &topology, &ch_names, analyzer] {
    auto m = analyzer ? ch_names.get() : reg.addr_nodes();
    for (const auto& [a, n] : topology) m[a] = n;
    return m;
  });
  live.set_fabric(std::move(fabric));
  daemon::Auth auth(ctx, s);  // before the sockets it secures, and destroyed after them
  std::unique_ptr<daemon::Ingest> ingest;
  if (!analyzer) ingest = std::make_unique<daemon::Ingest>(ctx, s, reg, live, &auth);
  // After the ingest: it connects to the ingest's endpoint, bound by now.
  std::optional<flowin::FlowListener> flows;
  if (!s.flow_listen.empty()) flows.emplace(ctx, s.flow_listen, s.listen, auth.collector_curve());
  daemon::QueryServer query(ctx, s, reg, live, own, &auth);
  live.preload();
  // Optional operator endpoints (http_api.hpp, webhooks.hpp); each is a thread of its own, off ingest's path.
  std::unique_ptr<daemon::HttpApi> http;
  if (!s.http_listen.empty()) http = std::make_unique<daemon::HttpApi>(s, query, live);
  std::unique_ptr<daemon::Webhooks> hooks;
  if (!s.webhooks.empty()) hooks = std::make_unique<daemon::Webhooks>(s.webhooks, live);
  std::unique_ptr<daemon::ClickHouseSink> sink;  // copies committed batches; reads the store, not the ingest
  if (!s.clickhouse_url.empty()) sink = std::make_unique<daemon::ClickHouseSink>(s, reg, own);
  std::unique_ptr<daemon::ClickHouseAnalyzer> follow;  // the analysis role's reader of ClickHouse
  if (analyzer) follow = std::make_unique<daemon::ClickHouseAnalyzer>(s, reg, live, ch_names);
  daemon::log_line(std::string("version ") + std::string(kVersion) +
                   (analyzer ? " analysing from ClickHouse" : " listening on " + s.listen) + ", queries on " +
                   s.query + (http ? ", HTTP on " + s.http_listen : "") + ", data in " + s.data_dir);

  std::jthread t_ingest, t_flows, t_http, t_hooks, t_sink, t_follow;
  if (ingest) t_ingest = std::jthread([&](std::stop_token st) { ingest->run(st); });
  if (follow) t_follow = std::jthread([&](std::stop_token st) { follow->run(st); });
  std::jthread t_live([&](std::stop_token st) { live.run(st); });
  std::jthread t_query([&](std::stop_token st) { query.run(st); });
  if (flows) t_flows = std::jthread([&](std::stop_token st) { flows->run(st); });
  if (http) t_http = std::jthread([&](std::stop_token st) { http->run(st); });
  if (hooks) t_hooks = std::jthread([&](std::stop_token st) { hooks->run(st); });
  if (sink) t_sink = std::jthread([&](std::stop_token st) { sink->run(st); });
  daemon::notify_ready(analyzer ? "analysing from ClickHouse" : "listening on " + s.listen);
  // Healthy: the analysis published a pass within the last minute (it runs every second, backing off to at
  // most 3x its own pass time) and the query server answers (its lock and the registry's are free).
  auto healthy = [&] {
    const uint64_t last = live.latest()->computed_ns, now = daemon::now_unix_ns();
    return now < last + 60'000'000'000ull && query.answer({{"cmd", "status"}}).value("ok", false);
  };
  int sig = 0;
  while ((sig = daemon::wait_for_stop_signal(sigs, healthy)) == SIGHUP) reload_allowlists(auth);
  daemon::notify_stopping();
  daemon::log_line(std::string("stopping on ") + strsignal(sig));
  return 0;  // the jthreads request stop and join here, before the parts they use go
}

}  // namespace

int main(int argc, char** argv) {
  daemon::Settings s;
  if (auto rc = daemon::parse_settings(argc, argv, s)) return *rc;

  // Ingest allocates and frees the same working set for every group (received frames, decoded batches,
  // msgpack zones). glibc would hand large freed blocks back to the kernel and fault them in again, which
  // showed up as ~15 % of ingest time in page faults; keep up to 256 MiB of freed heap instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);

  const sigset_t sigs = block_signals();
  if (auto err = lock_data_dir(s); !err.empty()) return cli::fail("netprism-aggregator", err);
  try {
    return serve(s, sigs);
  } catch (const std::runtime_error& e) {  // --flow-listen could not bind
    return cli::fail("netprism-aggregator", e.what());
  } catch (const zmq::error_t& e) {
    return cli::fail("netprism-aggregator", std::string("cannot bind: ") + e.what());
  } catch (const std::exception& e) {
    return cli::fail("netprism-aggregator", e.what());
  }
}
