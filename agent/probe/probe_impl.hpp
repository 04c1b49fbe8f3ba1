// Internal state of a Probe, shared by probe.cpp (load, config, ring buffer, flush) and attach.cpp (tc/XDP).
#pragma once

#include <bpf/libbpf.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "probe.hpp"
#include "probe.skel.h"

namespace netprism::agent {

// tc filters of the probe sit at this handle and priority on the clsact hook. The probe returns TC_ACT_OK,
// which ends the filter chain, so it goes near the end of the chain (high number = runs late): it never
// keeps another tool's filter from running. A filter found at this slot whose program is named like ours
// is a stale one from a crashed run and gets replaced; anything else there is foreign and is left alone.
inline constexpr uint32_t kTcHandle = 0x4e50;  // "NP"
inline constexpr uint32_t kTcPriority = 0xff4e;

struct SkelDeleter {
  void operator()(probe* s) const { probe::destroy(s); }
};
struct RingDeleter {
  void operator()(ring_buffer* r) const { ring_buffer__free(r); }
};

struct TcAttachment {
  int ifindex;
  bpf_tc_attach_point point;
  uint32_t prog_id;
  bool created_hook;
};
struct XdpAttachment {
  int ifindex;
  uint32_t flags;
  uint32_t prog_id;
};

// What the ring-buffer callback sees while poll() drains.
struct RingCtx {
  const FlowletSink* sink = nullptr;
  std::size_t delivered = 0;
  uint64_t malformed = 0;
};

struct Probe::Impl {
  std::unique_ptr<probe, SkelDeleter> skel;
  std::unique_ptr<ring_buffer, RingDeleter> ring;
  np_probe_config config{};
  std::vector<TcAttachment> tc;
  std::vector<XdpAttachment> xdp;
  RingCtx rctx;
  std::mutex flush_mu;  // one flush at a time: np_flush_req is a single slot
  ProbeVariant variant = ProbeVariant::kCompat;
  KernelFeatures features;
};

// While alive, libbpf's messages are captured (last one readable through last_libbpf_message()) instead of
// printed: expected outcomes such as "no filter at this slot" must not reach the agent's stderr.
class QuietLibbpf {
 public:
  QuietLibbpf();
  ~QuietLibbpf();
  QuietLibbpf(const QuietLibbpf&) = delete;
  QuietLibbpf& operator=(const QuietLibbpf&) = delete;

 private:
  libbpf_print_fn_t previous_;
};
const std::string& last_libbpf_message();

uint32_t prog_id_of(int prog_fd);
std::string prog_name_of_id(uint32_t id);

}  // namespace netprism::agent
