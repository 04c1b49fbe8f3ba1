#include "rdma.hpp"

#include <algorithm>

#include "log.hpp"
#include "netlink.hpp"
#include "verbs.hpp"

namespace netprism::agent {

RdmaSource::RdmaSource(const RdmaSourceOptions& o, const MonoToRealtime& clock) : o_(o), clock_(clock) {
  std::string verr;
  auto verbs_ports = enumerate_rdma_ports(verr);
  ifaces_ = rdma_interfaces(verbs_ports);
  ports_ = list_rdma_ports(o_.sysfs_root);
  if (ports_.empty() && verbs_ports.empty()) {
    log_info("no RDMA devices (libibverbs found none, " + o_.sysfs_root +
             " has no ports); watching TCP/UDP traffic only");
    qp_available_ = false;
    return;
  }
  tracker_ = std::make_unique<RdmaBurstTracker>(
      effective_gap(), o_.series ? o_.sample_ns : std::max(o_.max_burst_ns, effective_gap()));
  log_info("RDMA: " + std::to_string(verbs_ports.size()) + " verbs ports, " + std::to_string(ports_.size()) +
           " sysfs ports under " + o_.sysfs_root + " sampled every " +
           std::to_string(o_.sample_ns / 1'000'000) + " ms" + (verr.empty() ? "" : " (" + verr + ")"));
}

// Sampling resolution bounds the burst rule: a gap shorter than two samples cannot be seen.
uint64_t RdmaSource::effective_gap() const {
  return std::max(o_.gap_ns, 2 * o_.sample_ns);
}

// Due within half a period of its time: the loop's tick (agent.cpp tick_ns) has the sampling period and wakes
// a little after each tick, so "now >= previous + period" fell just short at every other tick, and the
// counters were read every 20 ms for 10 (soft-RoCE VMs: bursts of 17 ms at the median, 28-32 ms with the
// rank busy on the one CPU). Samples stay at least half a period apart.
static bool due(uint64_t now, uint64_t at, uint64_t period) {
  return now + period / 2 >= at;
}

void RdmaSource::tick(uint64_t now, Batcher& out) {
  if (tracker_ && due(now, next_sample_, o_.sample_ns)) {
    sample(now, out);
    next_sample_ = now + o_.sample_ns;
  }
  // The counters went flat: one table read now rather than at the next refresh. RoCE has no FIN; whether
  // the traffic stopped because the job ended (its QPs destroyed) or hangs (its QPs still connected) is in
  // the table, and the aggregator calls a silent job hung after max(2 steps, 1.5 s): a read kFlatNs into
  // the silence reaches it first (batches flush within 100 ms). At most one extra read per quiet period.
  const bool flat = moved_ns_ > 0 && now - moved_ns_ >= kFlatNs && flat_read_for_ != moved_ns_;
  if (qp_available_ && (due(now, next_qp_, o_.qp_refresh_ns) || flat)) {
    refresh_qps(now, out);
    next_qp_ = now + o_.qp_refresh_ns;
    if (moved_ns_ > 0 && now - moved_ns_ >= kFlatNs) flat_read_for_ = moved_ns_;
  }
}

void RdmaSource::sample(uint64_t now, Batcher& out) {
  bool ship = now >= next_ship_;
  if (ship) next_ship_ = now + o_.ship_samples_ns;
  std::vector<RdmaPortBurst> bursts;
  for (const auto& p : ports_) {
    RawPortCounters c;
    std::string err;
    if (!read_port_counters(p, c, err, ship)) {
      if (read_errors_++ == 0) log_warn("RDMA: " + err + " (further read errors only counted)");
      continue;
    }
    if (!c.bytes_from_netdev.empty() && netdev_logged_.insert(p.device).second)
      log_info("RDMA: " + p.device + " has no byte counters; its bytes and packets are " +
               c.bytes_from_netdev + "'s (every packet of that interface counts)");
    uint64_t ts = clock_.to_realtime(mono_now_ns());
    // Activity, for the flat-counters table read (tick): any counter of the port moved. rxe counts its
    // packets only in hw_counters (sent_pkts, rcvd_pkts); other NICs in the port counters.
    uint64_t sig = c.xmit_words + c.rcv_words + c.xmit_packets + c.rcv_packets;
    for (const char* k : {"sent_pkts", "rcvd_pkts"})
      if (auto it = c.hw.find(k); it != c.hw.end()) sig += it->second;
    if (auto [it, fresh] = activity_.try_emplace(p.device + "/" + std::to_string(p.port), sig);
        !fresh && it->second != sig) {
      it->second = sig;
      moved_ns_ = now;
    }
    tracker_->feed(p.device, p.port, ts, c, bursts);
    if (ship) out.add(to_sample(p, ts, c), now);
  }
  tracker_->flush(bursts, clock_.to_realtime(now));
  for (auto& b : bursts) out.add(b, now);
}

void RdmaSource::refresh_qps(uint64_t now, Batcher& out) {
  std::vector<QpEntry> qps;
  std::string err;
  const uint64_t read_start = mono_now_ns();
  if (!read_qp_table(qps, err)) {
    log_info("RDMA QP table not available (" + err + "); RoCE traffic is not attributed to QPs");
    qp_available_ = false;
    return;
  }
  qp_rows_ = qps.size();
  // The PSNs' time: the middle of the read (a dump of many QPs takes a while, and the counters source lines
  // the PSNs up with the port counters, stamped when they were read).
  last_qp_read_ns_ = clock_.to_realtime(read_start + (mono_now_ns() - read_start) / 2);
  for (auto& q : qps) {
    q.ts_ns = last_qp_read_ns_;  // the PSNs' time: the counters source differences them between reads
    out.add(q, now);
  }
}

void RdmaSource::finish(uint64_t now, Batcher& out) {
  // One last table read: a job that ended since the last refresh shows its QPs gone (RoCE has no FIN; the
  // aggregator reads a RoCE job's end from the tables, qp_teardown.cpp).
  if (qp_available_) refresh_qps(now, out);
  if (!tracker_) return;
  sample(now, out);  // one last reading, so the counters' movement up to the exit is reported
  std::vector<RdmaPortBurst> bursts;
  tracker_->flush(bursts);
  for (auto& b : bursts) out.add(b, now);
}

void RdmaSource::set_gap_multiplier(uint32_t m) {
  if (!tracker_) return;
  uint64_t gap = effective_gap() * m;
  tracker_->set_thresholds(gap, o_.series ? o_.sample_ns * m : std::max(o_.max_burst_ns * m, gap));
}

void RdmaSource::add_counters(Counters& c) const {
  if (tracker_) {
    const auto& r = tracker_->stats();
    c["rdma_samples"] = r.samples;
    c["rdma_bursts"] = r.bursts;
    c["rdma_counter_wraps"] = r.wraps;
    c["rdma_counter_resets"] = r.resets;
    c["rdma_counter_saturated"] = r.saturated;
  }
  c["rdma_read_errors"] = read_errors_;
  c["rdma_qps"] = qp_rows_;
  // The last QP table read even when it listed nothing: a QP absent from it is gone (counters source).
  if (last_qp_read_ns_) c["rdma_qp_table_read_ns"] = last_qp_read_ns_;
}

}  // namespace netprism::agent
