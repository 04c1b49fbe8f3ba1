#include "agent.hpp"

#include <net/if.h>
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "clock.hpp"
#include "delivery.hpp"
#include "log.hpp"
#include "netinfo.hpp"
#include "netprism/fd.hpp"
#include "netprism/version.hpp"
#include "netprism/wire.hpp"
#include "probe/probe.hpp"
#include "rdma/rdma.hpp"
#include "spool.hpp"
#include "tc_qdisc.hpp"

namespace netprism::agent {
namespace {

// The probe's burst thresholds when it reports none (probe_abi.h; reasoning in bpf/burst.h), used for the
// RDMA bursts so both follow one rule.
constexpr uint64_t kFallbackGapNs = NP_DEFAULT_GAP_NS;
constexpr uint64_t kFallbackMaxBurstNs = NP_DEFAULT_MAX_BURST_NS;

class Agent {
 public:
  explicit Agent(const AgentOptions& o) : o_(o) {}
  int run();

 private:
  bool setup(std::string& err);
  void on_flowlet(const np_flowlet& f);
  RdmaSourceOptions rdma_options() const;
  void seal_and_submit();
  void run_budget(uint64_t now);
  void apply_level();
  void shutdown();
  Counters counters() const;
  Hello make_hello();
  void watch_zmq_fd();
  void release_probe();
  uint64_t tick_ns() const;
  bool open_events(const Fd& sfd);
  bool stop_requested(const Fd& sfd, bool log);
  void drain_tick();
  void recalibrate_clock(uint64_t now);
  void run_timers(uint64_t now);
  void event_loop(const Fd& sfd);
  void linger(const Fd& sfd);
  void log_stopped();
  void notify_ready();

  AgentOptions o_;
  std::string node_;
  uint64_t epoch_ = 0;
  MonoToRealtime clock_;
  uint64_t recalibrations_ = 0;
  uint64_t watchdog_ns_ = 0, next_watchdog_ = 0;  // systemd's WatchdogSec= halved; 0: not asked for
  uint64_t max_clock_step_ns_ = 0;
  std::unique_ptr<Probe> probe_;
  mutable std::array<uint64_t, NP_CNT_MAX> last_probe_counters_{};
  uint64_t probe_compat_ = 0;  // 1: the compat program variant runs (bpf/README.md "Kernel variants")
  struct AddedQdisc {
    int ifindex;
    std::string marker;
  };
  std::vector<AddedQdisc> clsact_added_;  // interfaces whose clsact qdisc netprism added
  std::string clsact_marker(const std::string& ifname) const {
    return o_.spool_dir + "/.clsact-added-" + ifname;
  }
  std::unique_ptr<Spool> spool_;
  zmq::context_t zctx_{1};
  std::unique_ptr<Delivery> delivery_;
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<Budget> budget_;
  std::unique_ptr<RdmaSource> rdma_;

  uint64_t captured_ = 0, batched_records_ = 0;
  uint64_t counters_only_dropped_ = 0;  // RoCE flowlets left out in counters-only mode
  uint64_t base_gap_ns_ = 0, base_max_burst_ns_ = 0;
  Fd tfd_, ep_;  // the tick timerfd and the epoll set (open_events)
  int epfd_ = -1;
  int zmq_fd_watched_ = -1;
  uint64_t zmq_gen_watched_ = 0;

  uint64_t next_idle_flush_ = 0, next_clock_ = 0;
  uint64_t budget_window_start_ = 0, budget_cpu_start_ = 0, budget_records_start_ = 0;
};

Counters Agent::counters() const {
  Counters c;
  const auto& d = delivery_->stats();
  const auto& sp = spool_->stats();
  c["captured"] = captured_;
  if (o_.rdma_counters_only) c["rdma_counters_only_dropped"] = counters_only_dropped_;
  c["batched"] = batched_records_;
  c["shipped"] = d.shipped_records;
  c["acked"] = d.acked_records;
  c["spooled"] = d.spooled_records;
  c["pending"] = delivery_->pending_records();
  c["spool_bytes"] = spool_->bytes();
  c["dropped_spool_full"] = sp.dropped_records;
  c["dropped_spool_error"] = d.spool_error_records;
  c["dropped_rejected"] = d.rejected_records;
  c["spool_corrupt_files"] = sp.corrupt_files;
  c["resent_batches"] = d.resent_batches;
  c["duplicate_acks"] = d.duplicate_acks;
  c["unknown_node"] = d.unknown_node;
  c["reconnects"] = d.reconnects;
  c["rtt_us"] = d.rtt_ns / 1000;
  if (probe_) last_probe_counters_ = probe_->counters();  // kept for heartbeats after the probe is released
  for (int i = 0; i < NP_CNT_MAX; ++i)
    c[np_counter_name(i)] = last_probe_counters_[static_cast<std::size_t>(i)];
  c["probe_variant_compat"] = probe_compat_;
  if (rdma_) rdma_->add_counters(c);
  c["budget_level"] = static_cast<uint64_t>(budget_->level().level);
  c["budget_degrade_steps"] = budget_->degrade_steps();
  c["budget_recover_steps"] = budget_->recover_steps();
  c["budget_over_windows"] = budget_->over_windows();
  c["clock_recalibrations"] = recalibrations_;
  c["clock_max_step_ns"] = max_clock_step_ns_;
  c["clock_uncertainty_ns"] = clock_.uncertainty_ns();
  return c;
}

Hello Agent::make_hello() {
  Hello h;
  h.node = node_;
  h.agent_version = kVersion;
  h.epoch = epoch_;
  h.interfaces = interface_info(o_.ifaces);
  if (rdma_) h.interfaces.insert(h.interfaces.end(), rdma_->interfaces().begin(), rdma_->interfaces().end());
  h.clock = read_clock_discipline();
  h.sent_ns = real_now_ns();
  return h;
}

void Agent::on_flowlet(const np_flowlet& f) {
  if (o_.rdma_counters_only && f.key.proto == NP_PROTO_ROCE) {
    ++counters_only_dropped_;  // as if the NIC had offloaded it: the counters source stands for it
    return;
  }
  Flowlet w = f;
  w.first_ns = clock_.to_realtime(f.first_ns);
  w.last_ns = clock_.to_realtime(f.last_ns);
  ++captured_;
  uint64_t now = mono_now_ns();
  batcher_->add(w, now);
  if (batcher_->full()) seal_and_submit();
}

void Agent::seal_and_submit() {
  if (batcher_->records() == 0) return;
  uint32_t n = static_cast<uint32_t>(batcher_->records());
  batched_records_ += n;
  Batch b = batcher_->seal(real_now_ns(), counters());
  delivery_->submit({b.epoch, b.seq}, wire::encode(b), n);
}

// The RDMA source's settings: the agent's, with the probe's burst rule.
RdmaSourceOptions Agent::rdma_options() const {
  RdmaSourceOptions ro;
  ro.sysfs_root = o_.rdma_sysfs;
  ro.sample_ns = o_.rdma_sample_ns;
  ro.ship_samples_ns = o_.rdma_ship_samples_ns;
  ro.qp_refresh_ns = o_.rdma_qp_refresh_ns;
  ro.gap_ns = base_gap_ns_;
  ro.max_burst_ns = base_max_burst_ns_;
  if (o_.rdma_counters_only) {
    // The per-port series at the sampling resolution (one burst per active interval) and the QP table's
    // PSNs read with every sample: what the counters source splits the port's bytes among peers by.
    ro.series = true;
    ro.qp_refresh_ns = o_.rdma_sample_ns;
  }
  return ro;
}

bool Agent::setup(std::string& err) {
  node_ = o_.node;
  if (node_.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0 || !*host) {
      err = "cannot read the host name; pass --node";
      return false;
    }
    node_ = host;
  }
  epoch_ = real_now_ns();

  std::vector<EndpointAddr> agg;
  if (!resolve_endpoint(o_.aggregator, agg, err)) return false;
  ProbeOptions po;
  po.gap_ns = o_.probe_gap_ns;
  po.max_burst_ns = o_.probe_max_burst_ns;
  po.variant = parse_variant(o_.probe_variant).value_or(ProbeVariant::kAuto);
  for (const auto& a : agg) po.exclude.push_back({a.addr, a.port});
  // The spool directory also holds the markers of clsact qdiscs this agent added (see release_probe()).
  spool_ = std::make_unique<Spool>(o_.spool_dir, o_.spool_max_bytes);
  if (!spool_->open(err)) return false;
  probe_ = Probe::open(po, err);  // released (filters detached, our qdiscs removed) by release_probe()
  if (!probe_) {
    err = "cannot load the probe: " + err;
    return false;
  }
  probe_compat_ = probe_->variant() == ProbeVariant::kCompat;
  log_info(describe_choice(probe_->features(), po.variant, probe_->variant()));
  AttachMode mode = o_.mode == "xdp" ? AttachMode::kXdp : AttachMode::kTc;
  for (const auto& i : o_.ifaces) {
    if (mode == AttachMode::kTc) {
      int ifindex = static_cast<int>(if_nametoindex(i.c_str()));
      std::string qerr;
      auto present = has_clsact(ifindex, qerr);
      // A marker file records that we added the qdisc, so a run after a crash (whose tc filters and qdisc
      // outlive it) still knows the qdisc is netprism's to remove.
      std::string marker = clsact_marker(i);
      if (!present) {
        log_warn("cannot tell whether " + i + " already has a clsact qdisc (" + qerr +
                 "); it will be left in place");
      } else if (!*present) {
        std::ofstream(marker) << ifindex << "\n";
        clsact_added_.push_back({ifindex, marker});
      } else if (std::filesystem::exists(marker)) {
        log_info("the clsact qdisc on " + i + " was added by an earlier run that did not exit cleanly; " +
                 "it is removed at exit like one added now");
        clsact_added_.push_back({ifindex, marker});
      }
    }
    if (mode == AttachMode::kTc) {
      // Filters of a crashed run are found by program name and removed before attaching, so the probe
      // attaches fresh even where it could not identify them itself (reading a program by id needs
      // CAP_SYS_ADMIN, which the packaged unit does not grant).
      std::string serr;
      auto n = remove_stale_filters(static_cast<int>(if_nametoindex(i.c_str())), "np_tc_ingress",
                                    "np_tc_egress", serr);
      if (!n)
        log_warn("cannot look for filters an earlier run left on " + i + ": " + serr);
      else if (*n)
        log_info("removed " + std::to_string(*n) + " tc filter(s) an earlier run of the agent left on " + i);
    }
    if (!probe_->attach(i, mode, err)) {
      err = "cannot attach to " + i + ": " + err;
      return false;  // the Probe destructor detaches what was attached so far
    }
  }
  base_gap_ns_ = probe_->gap_ns() ? probe_->gap_ns() : (o_.probe_gap_ns ? o_.probe_gap_ns : kFallbackGapNs);
  base_max_burst_ns_ = probe_->max_burst_ns()
                           ? probe_->max_burst_ns()
                           : (o_.probe_max_burst_ns ? o_.probe_max_burst_ns : kFallbackMaxBurstNs);

  batcher_ = std::make_unique<Batcher>(node_, epoch_, o_.batching);
  budget_ = std::make_unique<Budget>(o_.budget);

  if (o_.rdma_enabled) rdma_ = std::make_unique<RdmaSource>(rdma_options(), clock_);

  DeliveryOptions dopt = o_.delivery;
  dopt.endpoint = o_.aggregator;
  delivery_ = std::make_unique<Delivery>(
      zctx_, dopt, *spool_, [this] { return make_hello(); },
      [this] {
        Heartbeat hb;
        hb.node = node_;
        hb.epoch = epoch_;
        hb.sent_ns = real_now_ns();
        hb.counters = counters();
        return hb;
      });
  return true;
}

void Agent::apply_level() {
  BudgetLevel l = budget_->level();
  batcher_->set_flush_interval(o_.batching.flush_interval_ns * l.flush_multiplier);
  std::string err;
  if (probe_ &&
      !probe_->set_thresholds(base_gap_ns_ * l.gap_multiplier, base_max_burst_ns_ * l.gap_multiplier, err))
    log_warn("budget: cannot retune the probe: " + err);
  if (rdma_) rdma_->set_gap_multiplier(l.gap_multiplier);
}

void Agent::run_budget(uint64_t now) {
  if (now - budget_window_start_ < budget_->options().window_ns) return;
  uint64_t cpu = process_cpu_ns();
  uint64_t recs = batched_records_ + batcher_->records();  // every record produced: flowlets and RDMA
  int before = budget_->level().level;
  if (budget_->observe(cpu - budget_cpu_start_, recs - budget_records_start_, now - budget_window_start_)) {
    BudgetLevel l = budget_->level();
    char buf[256];
    std::snprintf(
        buf, sizeof buf,
        "budget: level %d -> %d (cpu %.1f%% of budget %.1f%%, %.0f records/s of %.0f): flush interval "
        "x%u, burst gap x%u",
        before, l.level, budget_->last_cpu_percent(), o_.budget.cpu_percent, budget_->last_rate(),
        o_.budget.max_records_per_sec, l.flush_multiplier, l.gap_multiplier);
    (l.level > before ? log_warn : log_info)(buf);
    apply_level();
  }
  budget_window_start_ = now;
  budget_cpu_start_ = cpu;
  budget_records_start_ = recs;
}

void Agent::watch_zmq_fd() {
  int fd = delivery_->fd();
  uint64_t gen = delivery_->socket_generation();
  if (fd == zmq_fd_watched_ && gen == zmq_gen_watched_) return;
  // The old socket's fd is closed (and so left the epoll set) or still ours: DEL may fail, harmlessly.
  if (zmq_fd_watched_ >= 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, zmq_fd_watched_, nullptr);
  zmq_fd_watched_ = -1;
  zmq_gen_watched_ = gen;
  if (fd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = 3;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0) zmq_fd_watched_ = fd;
  }
}

// Detaches the probe everywhere and removes the clsact qdiscs this run added, unless someone else's filters
// now live under them.
void Agent::release_probe() {
  if (!probe_) return;
  probe_->detach_all();
  probe_.reset();
  for (const auto& q : clsact_added_) {
    std::string err;
    if (remove_clsact_if_unused(q.ifindex, err))
      std::filesystem::remove(q.marker);
    else if (!err.empty())
      log_warn("clsact qdisc on ifindex " + std::to_string(q.ifindex) + " left in place: " + err);
    // Other filters under it: left in place with its marker, so a later run removes it once they are gone.
  }
  clsact_added_.clear();
}

void Agent::shutdown() {
  auto sink = [this](const np_flowlet& f) { on_flowlet(f); };
  // Stop observing first, then collect everything still in the kernel: the ring buffer and the open bursts.
  probe_->detach_all();
  probe_->poll(sink);
  probe_->flush_idle(mono_now_ns(), true, sink);
  probe_->poll(sink);
  uint64_t now = mono_now_ns();
  if (rdma_) rdma_->finish(now, *batcher_);
  seal_and_submit();
  release_probe();
}

// Signals are blocked before anything is attached: a SIGTERM during start-up waits in the signalfd and
// leads to the normal clean shutdown instead of killing the process with filters attached.
Fd block_stop_signals() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  return Fd(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
}

// The tick drives every timer of the loop. 10 ms meets the batch deadline (100 ms) and the idle flush to
// within a tenth; a faster RDMA sampling period sets a faster tick, never below 1 ms.
uint64_t Agent::tick_ns() const {
  constexpr uint64_t kTickNs = 10'000'000ull;
  const uint64_t t = rdma_ && rdma_->sampling() ? std::min(o_.rdma_sample_ns, kTickNs) : kTickNs;
  return std::max<uint64_t>(t, 1'000'000ull);
}

// The epoll set: the probe's ring buffer (tag 0), the signalfd (1), the tick timerfd (2); the ZeroMQ fd (3)
// is (re)added by watch_zmq_fd(). False (logged) if an fd cannot be created.
bool Agent::open_events(const Fd& sfd) {
  tfd_ = Fd(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  ep_ = Fd(epoll_create1(EPOLL_CLOEXEC));
  if (sfd.get() < 0 || tfd_.get() < 0 || ep_.get() < 0) {
    log_error(std::string("cannot create event fds: ") + std::strerror(errno));
    return false;
  }
  epfd_ = ep_.get();
  const uint64_t tick = tick_ns();
  itimerspec its{};
  its.it_interval.tv_sec = static_cast<time_t>(tick / 1'000'000'000ull);
  its.it_interval.tv_nsec = static_cast<long>(tick % 1'000'000'000ull);
  its.it_value = its.it_interval;
  timerfd_settime(tfd_.get(), 0, &its, nullptr);
  auto add = [&](int fd, uint32_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  };
  add(probe_->ring_fd(), 0);
  add(sfd.get(), 1);
  add(tfd_.get(), 2);
  return true;
}

// Drains the signalfd; true if a stop signal arrived (logged when `log` is set).
bool Agent::stop_requested(const Fd& sfd, bool log) {
  bool stop = false;
  signalfd_siginfo si;
  while (read(sfd.get(), &si, sizeof si) == sizeof si) {
    if (log)
      log_info(std::string("received ") + strsignal(static_cast<int>(si.ssi_signo)) + "; shutting down");
    stop = true;
  }
  return stop;
}

void Agent::drain_tick() {
  uint64_t ticks;
  [[maybe_unused]] auto r = read(tfd_.get(), &ticks, sizeof ticks);
}

// Re-measures the monotonic -> realtime offset; a jump above 1 ms means the realtime clock was stepped (not
// slewed): worth a line in the log.
void Agent::recalibrate_clock(uint64_t now) {
  int64_t moved = clock_.calibrate();
  ++recalibrations_;
  uint64_t mag = static_cast<uint64_t>(moved < 0 ? -moved : moved);
  max_clock_step_ns_ = std::max(max_clock_step_ns_, mag);
  if (mag > 1'000'000) log_warn("clock: realtime moved " + std::to_string(moved) + " ns against monotonic");
  next_clock_ = now + o_.clock_recalibrate_ns;
}

// Everything due at `now`: the idle flush, RDMA sampling, a batch's deadline, clock and budget.
void Agent::run_timers(uint64_t now) {
  if (now >= next_idle_flush_) {
    probe_->flush_idle(now, false, [this](const np_flowlet& f) { on_flowlet(f); });
    next_idle_flush_ = now + o_.idle_flush_ns;
  }
  if (rdma_) rdma_->tick(now, *batcher_);
  if (batcher_->due(now)) seal_and_submit();
  if (now >= next_clock_) recalibrate_clock(now);
  run_budget(now);
  if (watchdog_ns_ && now >= next_watchdog_) {  // the loop turns at least every 100 ms: alive means healthy
    sd_notify(0, "WATCHDOG=1");
    next_watchdog_ = now + watchdog_ns_;
  }
}

// systemd (Type=notify): ready once the probe is attached and the loop is about to run; the watchdog
// interval it asked for, halved as sd_watchdog_enabled(3) recommends. Outside systemd these are no-ops.
void Agent::notify_ready() {
  sd_notify(0, ("READY=1\nSTATUS=watching as node '" + node_ + "', shipping to " + o_.aggregator).c_str());
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0) watchdog_ns_ = usec * 1000 / 2;
}

// The main loop, until a stop signal (or epoll fails).
void Agent::event_loop(const Fd& sfd) {
  auto sink = [this](const np_flowlet& f) { on_flowlet(f); };
  uint64_t now = mono_now_ns();
  budget_window_start_ = now;
  budget_cpu_start_ = process_cpu_ns();
  next_clock_ = now + o_.clock_recalibrate_ns;
  bool stop = false;
  while (!stop) {
    delivery_->service(mono_now_ns());
    watch_zmq_fd();
    epoll_event evs[8];
    int n = epoll_wait(epfd_, evs, 8, 100);
    if (n < 0 && errno != EINTR) {
      log_error(std::string("epoll_wait: ") + std::strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u32 == 0) probe_->poll(sink);
      if (evs[i].data.u32 == 1) stop = stop_requested(sfd, true) || stop;
      if (evs[i].data.u32 == 2) drain_tick();
      // 3, ZeroMQ: handled by service() at the top of the loop
    }
    run_timers(mono_now_ns());
  }
}

// Finite linger after shutdown(): wait for ACKs of what is left (a second signal stops waiting), then the
// rest waits in the spool for the next run.
void Agent::linger(const Fd& sfd) {
  uint64_t deadline = mono_now_ns() + o_.linger_ns;
  while (!delivery_->idle() && mono_now_ns() < deadline) {
    delivery_->service(mono_now_ns());
    watch_zmq_fd();
    epoll_event evs[8];
    int n = epoll_wait(epfd_, evs, 8, 10);
    bool again = false;
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u32 == 1) again = stop_requested(sfd, false) || again;
      if (evs[i].data.u32 == 2) drain_tick();
    }
    if (again) break;
  }
}

void Agent::log_stopped() {
  uint64_t left = delivery_->pending_records();
  delivery_->spool_all();
  const auto& d = delivery_->stats();
  log_info("stopped: captured " + std::to_string(captured_) + ", acked " + std::to_string(d.acked_records) +
           ", left in spool " + std::to_string(left) + " records (" + std::to_string(spool_->count()) +
           " batches), dropped " +
           std::to_string(spool_->stats().dropped_records + d.rejected_records + d.spool_error_records));
}

int Agent::run() {
  Fd sfd = block_stop_signals();
  std::string err;
  if (!setup(err)) {
    log_error(err);
    release_probe();
    return 1;
  }
  if (!open_events(sfd)) return 1;
  log_info("watching " + std::to_string(o_.ifaces.size()) + " interface(s) in " + o_.mode +
           " mode as node '" + node_ + "', shipping to " + o_.aggregator + " (epoch " +
           std::to_string(epoch_) + ")");
  notify_ready();
  event_loop(sfd);
  sd_notify(0, "STOPPING=1");
  shutdown();
  linger(sfd);
  log_stopped();
  return 0;
}

}  // namespace

int run_agent(const AgentOptions& opts) {
  Agent a(opts);
  return a.run();
}

}  // namespace netprism::agent
