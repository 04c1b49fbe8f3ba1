// Kernel feature probes for the eBPF probe and the choice of its program variant (bpf/README.md "Kernel
// variants"). One source, two variants, chosen before load through a read-only flag:
//   modern: bpf_loop (5.17+) for the lock spin and the idle flush, __sk_buff.tstamp_type (5.18+) to take
//   TCP's
//           departure time on egress without reading the clock;
//   compat: bounded loops in global functions instead of bpf_loop, and a clock-checked egress timestamp;
//           runs on 5.13+ (RHEL 9's 5.14, Ubuntu 22.04's 5.15).
// detect_kernel_features() asks this kernel; the rest are pure functions over its answer (unit-tested).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace netprism::agent {

enum class ProbeVariant { kAuto, kModern, kCompat };

const char* variant_name(ProbeVariant v);  // "auto", "modern", "compat"
std::optional<ProbeVariant> parse_variant(std::string_view s);

// What this kernel offers the probe. nullopt: could not tell (the BPF probes need CAP_BPF or root).
struct KernelFeatures {
  std::string release;          // uname -r
  std::optional<bool> btf;      // kernel BTF (CO-RE): CONFIG_DEBUG_INFO_BTF, 5.4+
  std::optional<bool> ringbuf;  // BPF_MAP_TYPE_RINGBUF: 5.8
  std::optional<bool> atomics;  // BPF_ATOMIC compare-and-swap (the probe's locks): 5.12
  // Kernel 5.13+ by its release number: the object holds bpf_loop's callback address loads (BPF_PSEUDO_FUNC,
  // 5.13) even where they are dead code, and compat passes pointers to global functions (5.12). No cheap
  // probe exists for these, so the release decides (a backporting vendor kernel is at least as new).
  std::optional<bool> kernel_5_13;
  std::optional<bool> bpf_loop;     // helper bpf_loop: 5.17
  std::optional<bool> tstamp_type;  // __sk_buff.tstamp_type in the kernel's BTF: 5.18
  std::string probe_error;          // why the BPF probes could not run, when they could not
};

// Asks the running kernel (loads a few tiny programs when privileged; reads btf_path).
KernelFeatures detect_kernel_features(const std::string& btf_path = "/sys/kernel/btf/vmlinux");

// The variant to load: `requested` unless it cannot run here (then `error` says why); kAuto picks modern
// only when both its features are known present, compat otherwise.
struct VariantChoice {
  ProbeVariant variant = ProbeVariant::kCompat;
  std::string error;  // non-empty: nothing can be loaded as asked
};
VariantChoice choose_variant(const KernelFeatures& f, ProbeVariant requested);

// One line per missing (or unknown) kernel feature, saying what it costs; empty when everything is there.
// `fatal` lines mean no variant can run; the others name what the compat variant does instead.
struct FeatureReport {
  std::vector<std::string> fatal;
  std::vector<std::string> degraded;
};
FeatureReport report_features(const KernelFeatures& f);

// One line for logs and --check: the variant chosen (or asked for) and the kernel it was chosen on, e.g.
// "probe variant compat (auto; kernel 5.15.0-91-generic: bpf_loop missing, __sk_buff.tstamp_type missing)".
std::string describe_choice(const KernelFeatures& f, ProbeVariant requested, ProbeVariant chosen);

}  // namespace netprism::agent
