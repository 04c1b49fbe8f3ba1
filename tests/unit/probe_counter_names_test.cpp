// Every probe counter ships under a name of its own (probe_abi.h's NP_COUNTERS list): a counter without a
// name -- as NP_CNT_LOCK_TIMEOUT once shipped as "probe_unknown" -- fails here.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "netprism/probe_abi.h"

namespace {

TEST(ProbeCounterNames, EveryCounterHasItsOwnName) {
  std::set<std::string> seen;
  for (int i = 0; i < NP_CNT_MAX; ++i) {
    const char* name = np_counter_name(i);
    ASSERT_NE(name, nullptr) << "counter " << i << " has no name";
    const std::string s = name;
    EXPECT_EQ(s.rfind("probe_", 0), 0u) << s;
    EXPECT_GT(s.size(), 6u) << "counter " << i;
    EXPECT_NE(s, "probe_unknown");
    EXPECT_TRUE(seen.insert(s).second) << s << " names two counters";
  }
  EXPECT_EQ(np_counter_name(NP_CNT_MAX), nullptr);
  EXPECT_EQ(np_counter_name(-1), nullptr);
}

TEST(ProbeCounterNames, NamesFollowTheEnumerators) {
  EXPECT_STREQ(np_counter_name(NP_CNT_PACKETS), "probe_packets");
  EXPECT_STREQ(np_counter_name(NP_CNT_RINGBUF_FULL), "probe_ringbuf_full");
  EXPECT_STREQ(np_counter_name(NP_CNT_RINGBUF_LOST_PACKETS), "probe_ringbuf_lost_packets");
  EXPECT_STREQ(np_counter_name(NP_CNT_FLUSH_DEFERRED), "probe_flush_deferred");
  EXPECT_STREQ(np_counter_name(NP_CNT_LOCK_TIMEOUT), "probe_lock_timeout");
}

}  // namespace
