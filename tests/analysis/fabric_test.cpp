// The topology file's fabric lines (topology.cpp) and the fabric diagnosis over jobs' directions
// (diagnosis_fabric.cpp), on a 4-leaf, 2-spine fabric with two DP4 ring jobs spread over the leaves (the
// testbed's layout: node k under leaf k % 4; job A n0-n3, job B n4-n7).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "stages.hpp"
#include "topology.hpp"

using namespace netprism::analysis;

namespace {

// GCC 12 warns (-Wrestrict, a false positive) on `"n" + std::to_string(k)`.
std::string named(const char* prefix, int k) {
  std::string s(prefix);
  s += std::to_string(k);
  return s;
}

std::string leaf(int k) {
  return named("leaf", k % 4);
}

// spine_of(a, b): the spine the pair's path takes; paths = false leaves the path lines out (ECMP unknown).
Fabric fabric(int (*spine_of)(int, int), bool paths = true) {
  Fabric f;
  for (int i = 0; i < 4; ++i) f.switches[named("leaf", i)] = "leaf";
  for (int j = 0; j < 2; ++j) f.switches[named("spine", j)] = "spine";
  for (int k = 0; k < 8; ++k) f.links.emplace_back(named("n", k), leaf(k));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) f.links.emplace_back(named("leaf", i), named("spine", j));
  for (int a = 0; a < 8 && paths; ++a)
    for (int b = 0; b < 8; ++b)
      if (a % 4 != b % 4)
        f.paths[{named("n", a), named("n", b)}] = {leaf(a), named("spine", spine_of(a, b)), leaf(b)};
  return f;
}

// Two DP4 rings (gloo sends to the left neighbour: n1->n0, n2->n1, ...); slow(a, b) says which are slow.
std::vector<JobDirections> rings(bool (*slow)(int, int)) {
  std::vector<JobDirections> jobs{{"A", {}}, {"B", {}}};
  for (int j = 0; j < 2; ++j)
    for (int r = 0; r < 4; ++r) {
      int a = 4 * j + r, b = 4 * j + (r + 3) % 4;
      DirectionState d;
      d.src = named("n", a);
      d.dst = named("n", b);
      d.measured = 12;
      if (slow(a, b)) d.onset = 6, d.ratio = 0.5, d.start_ns = 1000;
      jobs[static_cast<size_t>(j)].dirs.push_back(d);
    }
  return jobs;
}

// Every pair through spine0 but n6 -> n5 (through spine1): leaf1 has healthy traffic on its other uplink.
int spine_fn(int a, int b) {
  return a == 6 && b == 5 ? 1 : 0;
}
// Pairs of job A through spine0, of job B through spine1.
int spine_by_job(int a, int) {
  return a < 4 ? 0 : 1;
}
bool through(int a, int b, int l, int s, int (*spine_of)(int, int)) {
  return (a % 4 == l || b % 4 == l) && a % 4 != b % 4 && spine_of(a, b) == s;
}

}  // namespace

TEST(Fabric, TopologyFileSwitchLines) {
  std::string path = testing::TempDir() + "/fabric_topology.txt";
  {
    std::ofstream f(path);
    f << "10.0.0.1 n0\n10.0.0.2 n1  # comment\nlink n0 leaf0\nswitch leaf0 leaf\nswitch spine0\n"
         "link leaf0 spine0\nlink n1 leaf0\npath n0 n1 leaf0\n";
  }
  std::map<std::string, std::string> addr;
  Fabric fab;
  std::string err;
  ASSERT_TRUE(load_topology(path, addr, &fab, err)) << err;
  EXPECT_EQ(addr.size(), 2u);
  EXPECT_EQ(fab.switches.at("leaf0"), "leaf");
  EXPECT_EQ(fab.links.size(), 3u);
  EXPECT_EQ(fab.paths.at({"n0", "n1"}), std::vector<std::string>{"leaf0"});
  std::map<std::string, std::string> only;
  EXPECT_TRUE(load_topology(path, only, err)) << "the IP NODE reader accepts fabric lines";
  for (std::string bad : {"path n0 n1 leafX\nswitch leaf0\n", "link n0 n1\n", "switch\n", "link a\n",
                          "path n0 n1\n", "10.0.0.1 n0 extra\n"}) {
    std::ofstream(path) << bad;
    EXPECT_FALSE(load_topology(path, addr, &fab, err)) << bad;
    EXPECT_NE(err.find(path), std::string::npos) << err;
  }
  std::remove(path.c_str());
}

TEST(Fabric, NamesTheLinkBothJobsCross) {
  auto slow = [](int a, int b) { return through(a, b, 1, 0, spine_fn); };
  auto out = fabric_findings(fabric(spine_fn), rings(slow));
  ASSERT_EQ(out.size(), 2u);
  for (const auto& f : out) {
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].kind, "fabric");
    EXPECT_EQ(f[0].subject, "leaf1<->spine0");
    EXPECT_EQ(f[0].first_iteration, 6);
    EXPECT_NE(f[0].evidence.find("2 job(s)"), std::string::npos) << f[0].evidence;
  }
}

TEST(Fabric, NamesTheSwitchWhenAllItsUplinksAreSlow) {
  // Job A's traffic through spine0, job B's through spine1: both uplinks of leaf2 carry slow traffic.
  auto slow = [](int a, int b) { return (a % 4 == 2 || b % 4 == 2); };
  auto out = fabric_findings(fabric(spine_by_job), rings(slow));
  for (const auto& f : out) {
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].subject, "leaf2");
  }
}

TEST(Fabric, WithoutPathsNamesTheAmbiguousUplinks) {
  auto slow = [](int a, int b) { return through(a, b, 1, 0, spine_fn); };
  auto out = fabric_findings(fabric(spine_fn, false), rings(slow));
  for (const auto& f : out) {
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].subject, "leaf1<->spine0|leaf1<->spine1");
  }
}

TEST(Fabric, SlowHostNicIsNotAFabricFault) {
  // n1's NIC: both of its directions slow, nothing else; its uplink carries job B's healthy traffic too.
  auto slow = [](int a, int b) { return a == 1 || b == 1; };
  auto out = fabric_findings(fabric(spine_fn), rings(slow));
  for (const auto& f : out) EXPECT_TRUE(f.empty());
  // No slow direction at all (a straggler's compute, a healthy run): nothing.
  auto none = fabric_findings(fabric(spine_fn), rings([](int, int) { return false; }));
  for (const auto& f : none) EXPECT_TRUE(f.empty());
  // No fabric in the topology: nothing either.
  auto bare = fabric_findings(Fabric{}, rings([](int, int) { return true; }));
  for (const auto& f : bare) EXPECT_TRUE(f.empty());
}

// The recorded fabric runs (tests/e2e/samples/fabric_*) with their topology file's path lines dropped: ECMP's
// choice unknown, the one slow uplink is named with its twin (the leaf's other uplink); the slow leaf still
// by name, since the leaf's traffic crossed both spines and all of it ran slow.
TEST(Fabric, RecordedRunsWithoutPathLines) {
  for (auto [sample, want] :
       {std::pair<std::string, std::string>{"fabric_link", "leaf1<->spine0|leaf1<->spine1"},
        {"fabric_leaf", "leaf0"}}) {
    std::string dir = std::string(NP_SAMPLES_DIR) + "/" + sample;
    std::string topo = testing::TempDir() + "/" + sample + "_nopath.txt";
    {
      std::ifstream in(dir + "/topology.txt");
      std::ofstream out(topo);
      for (std::string line; std::getline(in, line);)
        if (line.rfind("path ", 0) != 0) out << line << "\n";
    }
    std::string err;
    auto in = load_csv(dir + "/flows.csv.gz", topo, err);
    ASSERT_TRUE(in) << err;
    EXPECT_TRUE(in->fabric.paths.empty());
    auto r = analyze(*in);
    ASSERT_EQ(r.jobs.size(), 2u);
    for (const auto& j : r.jobs) {
      std::vector<std::string> fabric;
      for (const auto& f : j.findings)
        if (f.kind == "fabric") fabric.push_back(f.subject);
      EXPECT_EQ(fabric, std::vector<std::string>{want}) << sample;
    }
    std::remove(topo.c_str());
  }
}
