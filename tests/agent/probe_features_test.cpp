// The probe's variant choice and the kernel lines of `netprism-agent --check` (agent/probe/features.hpp),
// from kernel feature sets as 5.10, 5.15 (Ubuntu 22.04), RHEL 9's 5.14, 6.1 (Debian 12) and 6.18 report them.
#include <gtest/gtest.h>

#include "probe/features.hpp"

namespace netprism::agent {
namespace {

KernelFeatures kernel(const char* release, bool loop, bool tstamp_type) {
  KernelFeatures f;
  f.release = release;
  f.btf = f.ringbuf = f.atomics = f.kernel_5_13 = true;
  f.bpf_loop = loop;
  f.tstamp_type = tstamp_type;
  return f;
}

bool any_has(const std::vector<std::string>& lines, const std::string& s) {
  for (const auto& l : lines)
    if (l.find(s) != std::string::npos) return true;
  return false;
}

TEST(ProbeFeatures, VariantNamesRoundTrip) {
  for (auto v : {ProbeVariant::kAuto, ProbeVariant::kModern, ProbeVariant::kCompat})
    EXPECT_EQ(parse_variant(variant_name(v)), v);
  EXPECT_FALSE(parse_variant("legacy"));
  EXPECT_FALSE(parse_variant(""));
}

TEST(ProbeFeatures, AutoPicksModernOnlyWithBothFeatures) {
  EXPECT_EQ(choose_variant(kernel("6.18.4", true, true), ProbeVariant::kAuto).variant, ProbeVariant::kModern);
  EXPECT_EQ(choose_variant(kernel("6.1.0-56-amd64", true, true), ProbeVariant::kAuto).variant,
            ProbeVariant::kModern);
  // 5.17: bpf_loop but no tstamp_type yet.
  EXPECT_EQ(choose_variant(kernel("5.17.0", true, false), ProbeVariant::kAuto).variant,
            ProbeVariant::kCompat);
  EXPECT_EQ(choose_variant(kernel("5.15.0-91-generic", false, false), ProbeVariant::kAuto).variant,
            ProbeVariant::kCompat);
  // A vendor kernel that backported bpf_loop and tstamp_type is judged by its features, not its number.
  EXPECT_EQ(choose_variant(kernel("5.14.0-427.el9.x86_64", true, true), ProbeVariant::kAuto).variant,
            ProbeVariant::kModern);
  KernelFeatures unknown = kernel("6.18.4", true, true);
  unknown.bpf_loop.reset();
  EXPECT_EQ(choose_variant(unknown, ProbeVariant::kAuto).variant, ProbeVariant::kCompat);
  for (const auto& k : {kernel("6.18.4", true, true), kernel("5.15.0", false, false)}) {
    auto c = choose_variant(k, ProbeVariant::kAuto);
    EXPECT_TRUE(c.error.empty());
  }
}

TEST(ProbeFeatures, ForcedVariants) {
  auto c = choose_variant(kernel("6.18.4", true, true), ProbeVariant::kCompat);
  EXPECT_EQ(c.variant, ProbeVariant::kCompat);
  EXPECT_TRUE(c.error.empty());
  c = choose_variant(kernel("6.18.4", true, true), ProbeVariant::kModern);
  EXPECT_EQ(c.variant, ProbeVariant::kModern);
  EXPECT_TRUE(c.error.empty());
  c = choose_variant(kernel("5.15.0-91-generic", false, false), ProbeVariant::kModern);
  EXPECT_EQ(
      c.error,
      "probe variant modern needs bpf_loop (5.17+) and __sk_buff.tstamp_type (5.18+), which this kernel "
      "(5.15.0-91-generic) lacks or could not be asked for: use probe variant auto or compat");
  c = choose_variant(kernel("5.17.0", true, false), ProbeVariant::kModern);
  EXPECT_NE(c.error.find("needs __sk_buff.tstamp_type (5.18+)"), std::string::npos) << c.error;
}

TEST(ProbeFeatures, CheckNamesEveryMissingFeatureWithItsCost) {
  auto r = report_features(kernel("6.18.4", true, true));
  EXPECT_TRUE(r.fatal.empty());
  EXPECT_TRUE(r.degraded.empty());

  r = report_features(kernel("5.15.0-91-generic", false, false));  // Ubuntu 22.04, DGX OS 6
  EXPECT_TRUE(r.fatal.empty());
  ASSERT_EQ(r.degraded.size(), 2u);
  EXPECT_EQ(
      r.degraded[0],
      "bpf_loop missing (kernel < 5.17): compat variant: the lock spin (65 536 attempts, at least 5 ms) "
      "and the idle flush (64 keys per run) are bounded loops over global BPF functions: same budgets, "
      "same results");
  EXPECT_EQ(r.degraded[1],
            "__sk_buff.tstamp_type missing (kernel < 5.18): compat variant: egress reads the clock and keeps "
            "TCP's departure time only when it lies within [-1 s, +10 s] of it: same times, one clock read "
            "(~20-90 ns) more per egress packet");

  KernelFeatures old = kernel("5.10.0-28-amd64", false, false);
  old.kernel_5_13 = false;
  r = report_features(old);
  ASSERT_EQ(r.fatal.size(), 1u);
  EXPECT_TRUE(any_has(r.fatal, "kernel 5.10.0-28-amd64 is older than 5.13")) << r.fatal[0];

  KernelFeatures bare = kernel("5.4.0", false, false);
  bare.ringbuf = bare.atomics = bare.kernel_5_13 = false;
  r = report_features(bare);
  EXPECT_TRUE(any_has(r.fatal, "BPF ring buffer missing (kernel < 5.8)"));
  EXPECT_TRUE(any_has(r.fatal, "BPF atomic compare-and-swap missing (kernel < 5.12)"));
  EXPECT_EQ(r.fatal.size(), 3u);
}

TEST(ProbeFeatures, UnprivilegedCheckSaysOnceWhyItCannotAsk) {
  KernelFeatures f = kernel("6.18.4", true, true);
  f.ringbuf.reset();
  f.atomics.reset();
  f.bpf_loop.reset();
  f.probe_error = "ring buffer probe: Operation not permitted";
  auto r = report_features(f);
  ASSERT_EQ(r.fatal.size(), 1u);
  EXPECT_EQ(r.fatal[0],
            "could not ask the kernel for its BPF features (ring buffer probe: Operation not permitted): run "
            "--check as root or with CAP_BPF");
  EXPECT_TRUE(r.degraded.empty());  // tstamp_type comes from the BTF file, readable without privileges
}

TEST(ProbeFeatures, DescribeChoice) {
  EXPECT_EQ(
      describe_choice(kernel("5.15.0-91-generic", false, false), ProbeVariant::kAuto, ProbeVariant::kCompat),
      "probe variant compat (auto; kernel 5.15.0-91-generic: bpf_loop missing, __sk_buff.tstamp_type "
      "missing)");
  KernelFeatures f = kernel("6.1.0-56-amd64", true, true);
  f.bpf_loop.reset();
  EXPECT_EQ(describe_choice(f, ProbeVariant::kCompat, ProbeVariant::kCompat),
            "probe variant compat (forced; kernel 6.1.0-56-amd64: bpf_loop unknown, __sk_buff.tstamp_type "
            "present)");
}

TEST(ProbeFeatures, ThisKernelAnswersWithoutPrivilegesForBtfAndRelease) {
  KernelFeatures f = detect_kernel_features();
  EXPECT_FALSE(f.release.empty());
  EXPECT_TRUE(f.kernel_5_13.has_value());
  KernelFeatures none = detect_kernel_features("/nonexistent/btf");
  EXPECT_EQ(none.btf, false);
  EXPECT_FALSE(none.tstamp_type.has_value());
}

}  // namespace
}  // namespace netprism::agent
