#include <gtest/gtest.h>

#include "netprism/config.hpp"

namespace netprism::config {
namespace {

const Schema kSchema = {{"node", Type::kString},
                        {"iface", Type::kStringList},
                        {"probe.gap_ms", Type::kFloat},
                        {"spool.max_mb", Type::kInteger},
                        {"debug", Type::kBool}};

TEST(Config, LoadsEveryType) {
  auto r = load_string(
      "node = \"gpu1\"\niface = [\"eth0\", \"eth1\"]\ndebug = true\n[probe]\ngap_ms = 2\n"
      "[spool]\nmax_mb = 512\n",
      kSchema);
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(get<std::string>(r.values, "node"), "gpu1");
  EXPECT_EQ((get<std::vector<std::string>>(r.values, "iface")), (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_EQ(get<double>(r.values, "probe.gap_ms"), 2.0);
  EXPECT_EQ(get<int64_t>(r.values, "spool.max_mb"), 512);
  EXPECT_EQ(get<bool>(r.values, "debug"), true);
  EXPECT_FALSE(get<std::string>(r.values, "absent"));
}

TEST(Config, UnknownKeyIsNamed) {
  auto r = load_string("[probe]\ngap_msec = 2\n", kSchema, "agent.toml");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error.find("agent.toml"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("probe.gap_msec"), std::string::npos) << r.error;
}

TEST(Config, WrongTypeIsNamed) {
  auto r = load_string("spool.max_mb = \"big\"\n", kSchema);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error.find("spool.max_mb"), std::string::npos) << r.error;
  r = load_string("iface = [\"eth0\", 3]\n", kSchema);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error.find("iface"), std::string::npos) << r.error;
}

TEST(Config, SyntaxErrorHasLine) {
  auto r = load_string("node = \"a\"\nnode2 = = 3\n", kSchema, "f.toml");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error.find("f.toml:2"), std::string::npos) << r.error;
}

TEST(Config, MissingFile) {
  auto r = load_file("/nonexistent/netprism.toml", kSchema);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error.find("/nonexistent/netprism.toml"), std::string::npos);
}

}  // namespace
}  // namespace netprism::config
