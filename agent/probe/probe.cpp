// Loading, configuration, ring-buffer draining, counters and idle flush of the kernel probe.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <time.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <string>

#include "probe_impl.hpp"

namespace netprism::agent {
namespace {

// libbpf reports why a load failed through its print callback; keep the last warning so open() can name
// the cause in its one-line error instead of spraying the verifier log on stderr.
thread_local std::string g_libbpf_last;
int libbpf_capture(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  char buf[512];
  int n = vsnprintf(buf, sizeof buf, fmt, args);
  if (n > 0) {
    std::string line(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) g_libbpf_last = line;
  }
  return 0;
}

// Bounds that catch unit mistakes (seconds given as ns, ns given as s) rather than tuning choices.
constexpr uint64_t kMinThresholdNs = 1'000;                 // 1 us
constexpr uint64_t kMaxThresholdNs = 3'600'000'000'000ULL;  // 1 h

int ring_cb(void* ctx, void* data, size_t size) {
  auto* impl = static_cast<RingCtx*>(ctx);
  if (size != sizeof(np_flowlet)) {
    ++impl->malformed;
    return 0;
  }
  np_flowlet rec;
  std::memcpy(&rec, data, sizeof rec);
  ++impl->delivered;
  if (impl->sink && *impl->sink) (*impl->sink)(rec);
  return 0;
}

}  // namespace

QuietLibbpf::QuietLibbpf() : previous_(libbpf_set_print(libbpf_capture)) {
  g_libbpf_last.clear();
}
QuietLibbpf::~QuietLibbpf() {
  libbpf_set_print(previous_);
}
const std::string& last_libbpf_message() {
  return g_libbpf_last;
}

uint64_t monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

Probe::Probe(Key) : impl_(std::make_unique<Impl>()) {}

Probe::~Probe() {
  detach_all();
}

std::unique_ptr<Probe> Probe::open(const ProbeOptions& opts, std::string& err) {
  const uint32_t front = opts.front_slots ? opts.front_slots : NP_FRONT_SLOTS_DEFAULT;
  // The slot index is a masked hash (bpf/burst.h): a power of two. 1 Mi slots = 128 MiB is far past any use.
  if ((front & (front - 1)) != 0 || front > (1u << 20)) {
    err = "probe front_slots = " + std::to_string(front) + " must be a power of two, at most 1048576";
    return nullptr;
  }
  auto p = std::make_unique<Probe>(Key{});
  p->impl_->features = detect_kernel_features();
  VariantChoice choice = choose_variant(p->impl_->features, opts.variant);
  if (!choice.error.empty()) {
    err = choice.error;
    return nullptr;
  }
  p->impl_->variant = choice.variant;
  int e = 0;
  {
    QuietLibbpf quiet;  // the verifier log would flood stderr; the last line goes into err
    p->impl_->skel.reset(probe::open());
    e = errno;
    if (p->impl_->skel) {
      if (opts.max_flows) bpf_map__set_max_entries(p->impl_->skel->maps.np_flows, opts.max_flows);
      bpf_map__set_max_entries(p->impl_->skel->maps.np_front, front);
      p->impl_->skel->rodata->np_front_mask = front - 1;
      p->impl_->skel->rodata->np_compat = choice.variant == ProbeVariant::kCompat ? 1 : 0;
      if (int r = probe::load(p->impl_->skel.get()); r != 0) {
        e = -r;
        p->impl_->skel.reset();
      }
    }
  }
  if (!p->impl_->skel) {
    err = "cannot load the eBPF probe (" + std::string(variant_name(choice.variant)) +
          " variant): " + std::string(std::strerror(e));
    if (!g_libbpf_last.empty()) err += " (libbpf: " + g_libbpf_last + ")";
    if (e == EPERM || e == EACCES) err += "; needs root or CAP_BPF+CAP_NET_ADMIN+CAP_PERFMON";
    return nullptr;
  }
  p->impl_->ring.reset(
      ring_buffer__new(bpf_map__fd(p->impl_->skel->maps.np_events), ring_cb, &p->impl_->rctx, nullptr));
  if (!p->impl_->ring) {
    err = "cannot open the probe's ring buffer: " + std::string(std::strerror(errno));
    return nullptr;
  }
  if (!p->set_thresholds(opts.gap_ns, opts.max_burst_ns, err)) return nullptr;
  if (!p->set_exclude(opts.exclude, err)) return nullptr;
  return p;
}

ProbeVariant Probe::variant() const {
  return impl_->variant;
}
const KernelFeatures& Probe::features() const {
  return impl_->features;
}

bool Probe::set_thresholds(uint64_t gap_ns, uint64_t max_burst_ns, std::string& err) {
  if (gap_ns == 0) gap_ns = NP_DEFAULT_GAP_NS;
  if (max_burst_ns == 0) max_burst_ns = NP_DEFAULT_MAX_BURST_NS;
  for (auto [name, v] : {std::pair{"gap_ns", gap_ns}, std::pair{"max_burst_ns", max_burst_ns}}) {
    if (v < kMinThresholdNs || v > kMaxThresholdNs) {
      err = std::string("probe threshold ") + name + " = " + std::to_string(v) + " ns is outside [1 us, 1 h]";
      return false;
    }
  }
  np_probe_config c = impl_->config;
  c.gap_ns = gap_ns;
  c.max_burst_ns = max_burst_ns;
  uint32_t zero = 0;
  if (bpf_map_update_elem(bpf_map__fd(impl_->skel->maps.np_config), &zero, &c, BPF_ANY) != 0) {
    err = "cannot write np_config: " + std::string(std::strerror(errno));
    return false;
  }
  impl_->config = c;
  return true;
}

uint64_t Probe::gap_ns() const {
  return impl_->config.gap_ns;
}
uint64_t Probe::max_burst_ns() const {
  return impl_->config.max_burst_ns;
}
uint64_t Probe::malformed_records() const {
  return impl_->rctx.malformed;
}

bool Probe::set_exclude(const std::vector<ProbeOptions::Exclude>& exclude, std::string& err) {
  if (exclude.size() > bpf_map__max_entries(impl_->skel->maps.np_exclude)) {
    err = "too many exclusion entries (" + std::to_string(exclude.size()) + ", at most " +
          std::to_string(bpf_map__max_entries(impl_->skel->maps.np_exclude)) + ")";
    return false;
  }
  int fd = bpf_map__fd(impl_->skel->maps.np_exclude);
  // Order matters for the data path: first publish the new entries and their flags (so nothing new slips
  // through), then drop entries that are no longer listed, then narrow the flags.
  np_probe_config c = impl_->config;
  np_probe_config final_c = impl_->config;
  final_c.flags = 0;
  final_c.exclude_port_bloom = 0;
  std::vector<np_exclude_key> keep;
  for (const auto& e : exclude) {
    np_exclude_key k{};
    std::memcpy(k.addr, e.addr.data(), 16);
    k.port = e.port;
    uint8_t one = 1;
    if (bpf_map_update_elem(fd, &k, &one, BPF_ANY) != 0) {
      err = "cannot write np_exclude: " + std::string(std::strerror(errno));
      return false;
    }
    keep.push_back(k);
    if (e.port) {
      final_c.flags |= NP_CFG_EXCLUDE_PORTS;
      final_c.exclude_port_bloom |= 1ULL << (e.port & 63);
    } else {
      final_c.flags |= NP_CFG_EXCLUDE_ADDRS;
    }
  }
  c.flags |= final_c.flags;
  c.exclude_port_bloom |= final_c.exclude_port_bloom;
  uint32_t zero = 0;
  int cfd = bpf_map__fd(impl_->skel->maps.np_config);
  if (bpf_map_update_elem(cfd, &zero, &c, BPF_ANY) != 0) {
    err = "cannot write np_config: " + std::string(std::strerror(errno));
    return false;
  }
  std::vector<np_exclude_key> stale;
  np_exclude_key cur{}, next{};
  for (int r = bpf_map_get_next_key(fd, nullptr, &next); r == 0; r = bpf_map_get_next_key(fd, &cur, &next)) {
    bool listed = false;
    for (const auto& k : keep) listed = listed || std::memcmp(&k, &next, sizeof k) == 0;
    if (!listed) stale.push_back(next);
    cur = next;
  }
  for (const auto& k : stale) bpf_map_delete_elem(fd, &k);
  if (bpf_map_update_elem(cfd, &zero, &final_c, BPF_ANY) != 0) {
    err = "cannot write np_config: " + std::string(std::strerror(errno));
    return false;
  }
  impl_->config = final_c;
  return true;
}

int Probe::ring_fd() const {
  return ring_buffer__epoll_fd(impl_->ring.get());
}

std::size_t Probe::poll(const FlowletSink& sink) {
  impl_->rctx.sink = &sink;
  impl_->rctx.delivered = 0;
  ring_buffer__consume(impl_->ring.get());
  impl_->rctx.sink = nullptr;
  return impl_->rctx.delivered;
}

std::vector<std::pair<uint32_t, np_front_slot>> read_front_slots(int front_fd) {
  std::vector<std::pair<uint32_t, np_front_slot>> out;
  bpf_map_info info{};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(front_fd, &info, &len) != 0 || info.max_entries == 0) return out;
  const uint32_t n = info.max_entries;
  std::vector<uint32_t> keys(n);
  std::vector<np_front_slot> vals(n);
  // One batched copy of the whole array (256 KiB by default) instead of a syscall per slot.
  uint32_t count = n, out_batch = 0;
  int r = bpf_map_lookup_batch(front_fd, nullptr, &out_batch, keys.data(), vals.data(), &count, nullptr);
  if (r != 0 && errno != ENOENT) {  // no batch support: one lookup per slot
    count = 0;
    for (uint32_t i = 0; i < n; ++i)
      if (bpf_map_lookup_elem(front_fd, &i, &vals[count]) == 0) keys[count++] = i;
  }
  for (uint32_t i = 0; i < count && i < n; ++i)
    if (vals[i].used) out.emplace_back(keys[i], vals[i]);
  return out;
}

std::size_t Probe::flush_idle(uint64_t now_mono_ns, bool all, const FlowletSink& sink) {
  std::lock_guard lock(impl_->flush_mu);
  poll(sink);  // make room in the ring before the flush writes into it
  const uint64_t gap = impl_->config.gap_ns;
  const uint64_t cutoff = now_mono_ns > gap ? now_mono_ns - gap : 0;
  int flows_fd = bpf_map__fd(impl_->skel->maps.np_flows);

  // Candidates from a racy read of both places a flow can live; np_flush decides under each entry's lock.
  std::vector<np_flow_key> cand;
  std::vector<uint32_t> cand_slot;
  for (const auto& [idx, slot] : read_front_slots(bpf_map__fd(impl_->skel->maps.np_front))) {
    if (!slot.used) continue;
    if (all || static_cast<int64_t>(slot.b.last_ns - cutoff) < 0) {
      cand.push_back(slot.key);
      cand_slot.push_back(idx);
    }
  }
  np_flow_key cur{}, next{};
  np_flow_state st{};
  for (int r = bpf_map_get_next_key(flows_fd, nullptr, &next); r == 0;
       r = bpf_map_get_next_key(flows_fd, &cur, &next)) {
    if (bpf_map_lookup_elem(flows_fd, &next, &st) == 0) {
      bool idle = st.b.packets == 0 || static_cast<int64_t>(st.b.last_ns - cutoff) < 0;
      if (all || idle) {
        cand.push_back(next);
        cand_slot.push_back(NP_FLUSH_IN_FLOWS);
      }
    }
    cur = next;
  }

  std::size_t flushed = 0;
  int req_fd = bpf_map__fd(impl_->skel->maps.np_flush_req);
  int prog_fd = bpf_program__fd(impl_->skel->progs.np_flush);
  auto req = std::make_unique<np_flush_req>();
  uint8_t pkt[64] = {};  // BPF_PROG_TEST_RUN of a tc program wants at least an Ethernet header
  for (std::size_t i = 0; i < cand.size(); i += NP_FLUSH_BATCH) {
    std::memset(req.get(), 0, sizeof *req);
    req->cutoff_ns = cutoff;
    req->flags = all ? NP_FLUSH_ALL : 0;
    req->n = static_cast<uint32_t>(std::min<std::size_t>(NP_FLUSH_BATCH, cand.size() - i));
    std::memcpy(req->keys, &cand[i], req->n * sizeof(np_flow_key));
    std::memcpy(req->slots, &cand_slot[i], req->n * sizeof(uint32_t));
    uint32_t zero = 0;
    if (bpf_map_update_elem(req_fd, &zero, req.get(), BPF_ANY) != 0) break;
    LIBBPF_OPTS(bpf_test_run_opts, run, .data_in = pkt, .data_size_in = sizeof pkt, .repeat = 1);
    if (bpf_prog_test_run_opts(prog_fd, &run) != 0) break;
    if (bpf_map_lookup_elem(req_fd, &zero, req.get()) != 0) break;
    flushed += req->flushed;
    if (req->deferred) poll(sink);  // ring was full: drain now; the rest goes in the next call
  }
  poll(sink);
  return flushed;
}

std::array<uint64_t, NP_CNT_MAX> Probe::counters() const {
  std::array<uint64_t, NP_CNT_MAX> out{};
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return out;
  std::vector<uint64_t> per(static_cast<std::size_t>(ncpu));
  int fd = bpf_map__fd(impl_->skel->maps.np_counters);
  for (uint32_t i = 0; i < NP_CNT_MAX; ++i) {
    if (bpf_map_lookup_elem(fd, &i, per.data()) != 0) continue;
    for (auto v : per) out[i] += v;
  }
  return out;
}

int Probe::program_fd(const std::string& name) const {
  bpf_program* p = bpf_object__find_program_by_name(impl_->skel->obj, name.c_str());
  return p ? bpf_program__fd(p) : -1;
}

int Probe::map_fd(const std::string& name) const {
  bpf_map* m = bpf_object__find_map_by_name(impl_->skel->obj, name.c_str());
  return m ? bpf_map__fd(m) : -1;
}

}  // namespace netprism::agent
