// SPDX-License-Identifier: GPL-2.0
/* probe.bpf.c with every modern-only kernel feature (bpf_loop, __sk_buff.tstamp_type) replaced by a call to a
 * helper no kernel has: the compat variant of this object must load, the modern one must not
 * (tests/bpf/probe_variant_test.cpp). Built by bpf/CMakeLists.txt, never loaded by the agent. */
#define NP_POISON_MODERN 1
#include "probe.bpf.c"
