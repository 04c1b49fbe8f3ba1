// Kernel feature probes and the probe's variant choice (features.hpp).
#include "features.hpp"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "probe_impl.hpp"

namespace netprism::agent {
namespace {

bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

// 1 supported, 0 refused as invalid (the kernel does not know it), nullopt: could not ask (EPERM, ...).
std::optional<bool> verdict(int r, std::string& why, const char* what) {
  if (r > 0) return true;
  if (r == 0) return false;
  if (why.empty()) why = std::string(what) + ": " + std::strerror(-r);
  return std::nullopt;
}

// A tc program doing one 64-bit compare-and-swap on its stack: what the probe's locks are made of.
std::optional<bool> probe_atomics(std::string& why) {
  const bpf_insn prog[] = {
      insn(BPF_ST | BPF_MEM | BPF_DW, BPF_REG_10, 0, -8, 0),  // *(u64 *)(r10 - 8) = 0
      insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0),  // r0 = 0 (expected)
      insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_1, 0, 0, 1),  // r1 = 1 (new)
      insn(BPF_STX | BPF_DW | BPF_ATOMIC, BPF_REG_10, BPF_REG_1, -8, BPF_CMPXCHG),
      insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0),  // return TC_ACT_OK
      insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
  };
  int fd = bpf_prog_load(BPF_PROG_TYPE_SCHED_CLS, "np_feat_atomic", "GPL", prog, sizeof prog / sizeof prog[0],
                         nullptr);
  if (fd >= 0) {
    close(fd);
    return true;
  }
  int e = errno;
  if (e == EINVAL) return false;  // the verifier does not know BPF_ATOMIC
  if (why.empty()) why = std::string("compare-and-swap probe: ") + std::strerror(e);
  return std::nullopt;
}

// __sk_buff.tstamp_type in the kernel's BTF: exactly what the probe's CO-RE relocation resolves against.
std::optional<bool> btf_has_tstamp_type(const std::string& btf_path, bool& btf_ok) {
  btf* b = btf__parse(btf_path.c_str(), nullptr);
  btf_ok = b != nullptr;
  if (!b) return std::nullopt;
  std::optional<bool> out = false;
  int id = btf__find_by_name_kind(b, "__sk_buff", BTF_KIND_STRUCT);
  if (id < 0) {
    out = std::nullopt;
  } else {
    const btf_type* t = btf__type_by_id(b, static_cast<uint32_t>(id));
    const btf_member* m = btf_members(t);
    for (uint16_t i = 0; i < btf_vlen(t); ++i)
      if (std::strcmp(btf__name_by_offset(b, m[i].name_off), "tstamp_type") == 0) out = true;
  }
  btf__free(b);
  return out;
}

std::optional<bool> release_at_least(const std::string& release, int major, int minor) {
  int a = 0, b = 0;
  if (std::sscanf(release.c_str(), "%d.%d", &a, &b) != 2) return std::nullopt;
  return a > major || (a == major && b >= minor);
}

}  // namespace

const char* variant_name(ProbeVariant v) {
  switch (v) {
    case ProbeVariant::kAuto:
      return "auto";
    case ProbeVariant::kModern:
      return "modern";
    case ProbeVariant::kCompat:
      return "compat";
  }
  return "?";
}

std::optional<ProbeVariant> parse_variant(std::string_view s) {
  for (auto v : {ProbeVariant::kAuto, ProbeVariant::kModern, ProbeVariant::kCompat})
    if (s == variant_name(v)) return v;
  return std::nullopt;
}

KernelFeatures detect_kernel_features(const std::string& btf_path) {
  KernelFeatures f;
  utsname u{};
  if (uname(&u) == 0) f.release = u.release;
  f.kernel_5_13 = release_at_least(f.release, 5, 13);
  bool btf_ok = false;
  f.tstamp_type = btf_has_tstamp_type(btf_path, btf_ok);
  f.btf = btf_ok;
  QuietLibbpf quiet;  // libbpf would log each refused probe program
  f.ringbuf =
      verdict(libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr), f.probe_error, "ring buffer probe");
  f.bpf_loop = verdict(libbpf_probe_bpf_helper(BPF_PROG_TYPE_SCHED_CLS, BPF_FUNC_loop, nullptr),
                       f.probe_error, "bpf_loop probe");
  f.atomics = probe_atomics(f.probe_error);
  return f;
}

VariantChoice choose_variant(const KernelFeatures& f, ProbeVariant requested) {
  VariantChoice c;
  const bool modern_ok = f.bpf_loop.value_or(false) && f.tstamp_type.value_or(false);
  if (requested == ProbeVariant::kCompat) {
    c.variant = ProbeVariant::kCompat;
  } else if (requested == ProbeVariant::kModern) {
    c.variant = ProbeVariant::kModern;
    if (!modern_ok) {
      std::string missing;
      if (!f.bpf_loop.value_or(false)) missing = "bpf_loop (5.17+)";
      if (!f.tstamp_type.value_or(false))
        missing += std::string(missing.empty() ? "" : " and ") + "__sk_buff.tstamp_type (5.18+)";
      c.error = "probe variant modern needs " + missing + ", which this kernel (" + f.release +
                ") lacks or could not be asked for: use probe variant auto or compat";
    }
  } else {
    // Unknown counts as missing: compat runs wherever modern does, at the cost of one clock read per egress
    // packet, so a probe that could not ask never risks a load failure.
    c.variant = modern_ok ? ProbeVariant::kModern : ProbeVariant::kCompat;
  }
  return c;
}

FeatureReport report_features(const KernelFeatures& f) {
  FeatureReport r;
  // Kernel BTF is reported by check_environment (it names the path and the kernel option).
  if (!f.kernel_5_13.value_or(true))
    r.fatal.push_back("kernel " + f.release +
                      " is older than 5.13 (function-pointer loads, pointer arguments of global BPF "
                      "functions): no probe variant loads; the oldest supported kernel is 5.13");
  if (!f.ringbuf || !f.atomics || !f.bpf_loop)  // one line: the capability check names what is missing
    r.fatal.push_back("could not ask the kernel for its BPF features (" +
                      (f.probe_error.empty() ? std::string("no answer") : f.probe_error) +
                      "): run --check as root or with CAP_BPF");
  if (f.ringbuf == false)
    r.fatal.push_back("BPF ring buffer missing (kernel < 5.8): no probe variant can deliver bursts");
  if (f.atomics == false)
    r.fatal.push_back(
        "BPF atomic compare-and-swap missing (kernel < 5.12): no probe variant can lock its flow entries");
  if (f.bpf_loop == false)
    r.degraded.push_back(
        "bpf_loop missing (kernel < 5.17): compat variant: the lock spin (65 536 attempts, at least 5 ms) "
        "and the "
        "idle "
        "flush (64 keys per run) are bounded loops over global BPF functions: same budgets, same results");
  if (!f.tstamp_type) {
    if (f.btf.value_or(false))  // (no BTF at all is check_environment's line)
      r.degraded.push_back("the kernel BTF has no struct __sk_buff: auto picks the compat variant");
  } else if (!*f.tstamp_type)
    r.degraded.push_back(
        "__sk_buff.tstamp_type missing (kernel < 5.18): compat variant: egress reads the clock and keeps "
        "TCP's "
        "departure time only when it lies within [-1 s, +10 s] of it: same times, one clock read (~20-90 ns) "
        "more per egress packet");
  return r;
}

std::string describe_choice(const KernelFeatures& f, ProbeVariant requested, ProbeVariant chosen) {
  auto state = [](const std::optional<bool>& v) { return !v ? "unknown" : *v ? "present" : "missing"; };
  return std::string("probe variant ") + variant_name(chosen) + " (" +
         (requested == ProbeVariant::kAuto ? "auto" : "forced") + "; kernel " +
         (f.release.empty() ? "?" : f.release) + ": bpf_loop " + state(f.bpf_loop) +
         ", __sk_buff.tstamp_type " + state(f.tstamp_type) + ")";
}

}  // namespace netprism::agent
