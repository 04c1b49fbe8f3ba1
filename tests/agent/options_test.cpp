#include "options.hpp"

#include <algorithm>

#include <gtest/gtest.h>

#include "netinfo.hpp"

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

TEST(NetInfo, AggregatorEndpointResolvesForTheExclusionList) {
  std::vector<EndpointAddr> out;
  std::string err;
  ASSERT_TRUE(resolve_endpoint("tcp://127.0.0.1:7470", out, err)) << err;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(format_addr(out[0].addr.data()), "127.0.0.1");
  EXPECT_EQ(out[0].port, 7470);
  ASSERT_TRUE(resolve_endpoint("tcp://[fd00::7]:9", out, err)) << err;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(format_addr(out[0].addr.data()), "fd00::7");
  EXPECT_TRUE(resolve_endpoint("ipc:///run/netprism.sock", out, err));  // no network traffic to exclude
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(resolve_endpoint("tcp://127.0.0.1", out, err));
  EXPECT_NE(err.find("port"), std::string::npos) << err;
  EXPECT_FALSE(resolve_endpoint("tcp://127.0.0.1:99999", out, err));
  EXPECT_FALSE(resolve_endpoint("127.0.0.1:7470", out, err));
  EXPECT_NE(err.find("transport"), std::string::npos) << err;
}

TEST(NetInfo, InterfaceAddressesForHello) {
  auto info = interface_info({"lo"});
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0].name, "lo");
  EXPECT_GT(info[0].ifindex, 0u);
  EXPECT_NE(std::find(info[0].addrs.begin(), info[0].addrs.end(), "127.0.0.1"), info[0].addrs.end());
}
