// netprism-aggregator: central ingest, storage and analysis daemon.
// Three threads: ingest (ROUTER, the store's only batch writer), live analysis, query endpoint (REP).
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
#include "daemon/ingest.hpp"
#include "daemon/live_analysis.hpp"
#include "daemon/log.hpp"
#include "daemon/query_server.hpp"
#include "daemon/registry.hpp"
#include "daemon/settings.hpp"
#include "netprism/cli.hpp"
#include "netprism/version.hpp"

using namespace netprism;

int main(int argc, char** argv) {
  daemon::Settings s;
  if (auto rc = daemon::parse_settings(argc, argv, s)) return *rc;

  // Ingest allocates and frees the same working set for every group (received frames, decoded batches,
  // msgpack zones). glibc would hand large freed blocks back to the kernel and fault them in again, which
  // showed up as ~15 % of ingest time in page faults; keep up to 256 MiB of freed heap instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);

  // Block the stop signals in every thread; main waits for them with sigwait.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);  // re-reads the allowlists (daemon/auth.hpp)
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  std::error_code ec;
  std::filesystem::create_directories(s.data_dir, ec);
  if (ec)
    return cli::fail("netprism-aggregator", "cannot create data dir " + s.data_dir + ": " + ec.message());

  // One daemon per data dir: a second one would interleave its own duplicate bookkeeping with ours. The lock
  // is released by the kernel when this process ends, however it ends (kill -9 included).
  std::string lock_path = s.data_dir + "/aggregator.lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0)
    return cli::fail("netprism-aggregator", "data dir " + s.data_dir +
                                                " is in use by another netprism-aggregator (" +
                                                std::strerror(errno) + ")");

  try {
    zmq::context_t ctx(1);
    store::OwnTraffic own;
    for (const auto& ep : {s.listen, s.query})
      if (auto p = store::endpoint_port(ep)) own.ports.insert(*p);

    daemon::Registry reg;
    {
      store::Store boot(s.data_dir, store::Db::Mode::kReadWrite, static_cast<int>(s.zstd_level));
      // Ports of earlier runs stay excluded too: their traffic may still be in the window.
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
    daemon::LiveAnalysis live(s, own, [&reg] { return reg.addr_nodes(); });
    daemon::Auth auth(ctx, s);  // before the sockets it secures, and destroyed after them
    daemon::Ingest ingest(ctx, s, reg, live, &auth);
    daemon::QueryServer query(ctx, s, reg, live, own, &auth);
    live.preload();
    daemon::log_line(std::string("version ") + std::string(kVersion) + " listening on " + s.listen +
                     ", queries on " + s.query + ", data in " + s.data_dir);

    {
      std::jthread t_ingest([&](std::stop_token st) { ingest.run(st); });
      std::jthread t_live([&](std::stop_token st) { live.run(st); });
      std::jthread t_query([&](std::stop_token st) { query.run(st); });
      int sig = 0;
      while (sigwait(&sigs, &sig) == 0 && sig == SIGHUP) {
        auto err = auth.reload();
        daemon::log_line(err.empty()
                             ? "SIGHUP: allowlists reloaded: " + std::to_string(auth.agents()) +
                                   " agent key(s), " + std::to_string(auth.clients()) + " client key(s)"
                             : "SIGHUP: allowlists not reloaded (the old ones stay in force): " + err);
      }
      daemon::log_line(std::string("stopping on ") + strsignal(sig));
    }  // jthreads request stop and join here
    return 0;
  } catch (const zmq::error_t& e) {
    return cli::fail("netprism-aggregator", std::string("cannot bind: ") + e.what());
  } catch (const std::exception& e) {
    return cli::fail("netprism-aggregator", e.what());
  }
}
