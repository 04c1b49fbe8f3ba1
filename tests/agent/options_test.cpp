#include "options.hpp"

#include <gtest/gtest.h>

using namespace netprism;
using namespace netprism::agent;

TEST(AgentOptions, FileFillsWhatFlagsLeftUnset) {
  auto r = config::load_string(R"(
aggregator = "tcp://10.0.0.1:7470"
node = "gpu7"
iface = ["eth0", "eth1"]
mode = "xdp"
spool_dir = "/tmp/s"
[batching]
flush_interval_ms = 250
[delivery]
ack_timeout_ms = 1500
[budget]
cpu_percent = 12.5
)",
                               agent_schema());
  ASSERT_TRUE(r) << r.error;
  AgentOptions o;
  o.node = "from-flag";
  ASSERT_EQ(apply_config(r.values, {"node"}, o), "");
  EXPECT_EQ(o.aggregator, "tcp://10.0.0.1:7470");
  EXPECT_EQ(o.node, "from-flag");  // the flag wins
  EXPECT_EQ(o.ifaces, (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_EQ(o.mode, "xdp");
  EXPECT_EQ(o.batching.flush_interval_ns, 250'000'000u);
  EXPECT_EQ(o.delivery.ack_timeout_ns, 1'500'000'000u);
  EXPECT_DOUBLE_EQ(o.budget.cpu_percent, 12.5);
  EXPECT_EQ(validate(o), "");
}

TEST(AgentOptions, BadFileNamesTheKey) {
  auto r = config::load_string("[delivery]\nwindw = 3\n", agent_schema(), "agent.toml");
  EXPECT_FALSE(r);
  EXPECT_NE(r.error.find("delivery.windw"), std::string::npos) << r.error;
  r = config::load_string("iface = \"eth0\"\n", agent_schema(), "agent.toml");
  EXPECT_NE(r.error.find("iface"), std::string::npos) << r.error;
  r = config::load_string("[batching]\nmax_records = -4\n", agent_schema());
  ASSERT_TRUE(r);
  AgentOptions o;
  EXPECT_NE(apply_config(r.values, {}, o).find("batching.max_records"), std::string::npos);
  o.mode = "ebpf";
  EXPECT_NE(validate(o).find("mode"), std::string::npos);
}
