// CURVE key files and allowlists (include/netprism/keys.hpp).
#include "netprism/keys.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

using namespace netprism;

namespace {

struct TmpDir {
  std::string path =
      (std::filesystem::temp_directory_path() / ("np_keys_" + std::to_string(::getpid()))).string();
  TmpDir() { std::filesystem::create_directories(path); }
  ~TmpDir() { std::filesystem::remove_all(path); }
};

// A valid Z85 key that contains '#' (a Z85 digit), to prove comments do not cut keys.
const std::string kHashKey = "S+$*jDHg3{[(K#4vP&/4kUR[xfBAIkMjUG9(L8(:";

}  // namespace

TEST(Keys, GenerateWritesSecret0600AndPublicAndNeverOverwrites) {
  TmpDir d;
  keys::KeyPair kp;
  ASSERT_EQ(keys::generate(d.path + "/a", &kp), "");
  struct stat st {};
  ASSERT_EQ(::stat((d.path + "/a.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string err;
  auto sec = keys::read_secret(d.path + "/a.key", err);
  ASSERT_TRUE(sec) << err;
  EXPECT_EQ(sec->public_z85, kp.public_z85);  // derived from the secret
  EXPECT_EQ(keys::read_public(d.path + "/a.pub", err), kp.public_z85);
  EXPECT_NE(keys::generate(d.path + "/a"), "");  // exists: refused, the old key stays
  EXPECT_EQ(keys::read_secret(d.path + "/a.key", err)->secret_z85, kp.secret_z85);
}

TEST(Keys, WorldReadableSecretAndGarbageRefused) {
  TmpDir d;
  ASSERT_EQ(keys::generate(d.path + "/a"), "");
  ::chmod((d.path + "/a.key").c_str(), 0644);
  std::string err;
  EXPECT_FALSE(keys::read_secret(d.path + "/a.key", err));
  EXPECT_NE(err.find("chmod 600"), std::string::npos) << err;
  std::ofstream(d.path + "/bad.pub") << "not a key\n";
  EXPECT_FALSE(keys::read_public(d.path + "/bad.pub", err));
  EXPECT_FALSE(keys::read_public(d.path + "/missing.pub", err));
  keys::ClientCurve c;
  EXPECT_NE(keys::load_client("", d.path + "/a.pub", c).find("--insecure"), std::string::npos);
}

TEST(Keys, AllowlistCommentsRolesAndErrors) {
  ASSERT_TRUE(keys::valid_z85(kHashKey));
  auto a = keys::parse_allowlist("# agents\n\nnode-a " + kHashKey + "   # rack 3\n", "agents", false);
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(a.by_key.size(), 1u);
  EXPECT_EQ(a.by_key.at(kHashKey), "node-a");

  auto r = keys::parse_allowlist("admin " + kHashKey + "\n", "clients", true);
  EXPECT_EQ(r.by_key.at(kHashKey), "admin");
  EXPECT_NE(keys::parse_allowlist("root " + kHashKey + "\n", "clients", true).error.find("clients:1: role"),
            std::string::npos);
  EXPECT_NE(keys::parse_allowlist("node-a\n", "agents", false).error, "");
  EXPECT_NE(keys::parse_allowlist("node-a short\n", "agents", false).error.find("not a Z85"),
            std::string::npos);
  EXPECT_NE(keys::parse_allowlist("node-a " + kHashKey + " extra\n", "agents", false).error, "");
  // One key, one node: the same key for two nodes is an error, and nothing of the file is used.
  auto dup = keys::parse_allowlist("a " + kHashKey + "\nb " + kHashKey + "\n", "agents", false);
  EXPECT_NE(dup.error.find("agents:2: key listed twice"), std::string::npos) << dup.error;
  EXPECT_TRUE(dup.by_key.empty());
}
