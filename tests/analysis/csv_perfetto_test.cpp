// CSV import (errors name the line) and the Perfetto trace-event structure.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <unistd.h>

#include "synth.hpp"

using namespace netprism::analysis;

namespace {
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char buf[] = "/tmp/np-analysis-XXXXXX";
    int fd = mkstemp(buf);
    path = buf;
    if (fd >= 0) {
      (void)!write(fd, text.data(), text.size());
      close(fd);
    }
  }
  ~TempFile() { std::remove(path.c_str()); }
};
}  // namespace

TEST(AnalysisCsv, BadRowsAreErrorsWithTheirLineNumber) {
  std::string err;
  TempFile missing("src_ip,dst_ip,src_port,bytes,start_ns,end_ns\n");
  EXPECT_FALSE(load_csv(missing.path, "", err));
  EXPECT_NE(err.find("dst_port"), std::string::npos) << err;
  TempFile bad(
      "src_ip,dst_ip,src_port,dst_port,bytes,start_ns,end_ns\n1.1.1.1,2.2.2.2,1,2,100,5,9\n"
      "1.1.1.1,2.2.2.2,1,2,abc,5,9\n");
  EXPECT_FALSE(load_csv(bad.path, "", err));
  EXPECT_NE(err.find(":3:"), std::string::npos) << err;
  TempFile order("src_ip,dst_ip,src_port,dst_port,bytes,start_ns,end_ns\n1.1.1.1,2.2.2.2,1,2,100,9,5\n");
  EXPECT_FALSE(load_csv(order.path, "", err));
  TempFile port("src_ip,dst_ip,src_port,dst_port,bytes,start_ns,end_ns\n1.1.1.1,2.2.2.2,1,70000,100,5,9\n");
  EXPECT_FALSE(load_csv(port.path, "", err));
  EXPECT_FALSE(load_csv("/nonexistent/flows.csv", "", err));
  TempFile topo("1.1.1.1 a b\n");
  TempFile ok("src_ip,dst_ip,src_port,dst_port,bytes,start_ns,end_ns\n");
  EXPECT_FALSE(load_csv(ok.path, topo.path, err));
}

TEST(AnalysisCsv, RoundTripOfSyntheticJobGivesSameAnalysis) {
  synth::Spec s;
  s.dp = 2;
  s.pp = 2;
  Input in;
  synth::generate(s, in);
  std::string csv =
      "node,start_ns,end_ns,src_ip,dst_ip,src_port,dst_port,bytes,packets,proto\n";  // any order
  for (const auto& e : in.events)
    csv += e.observer + "," + std::to_string(e.first_ns) + "," + std::to_string(e.last_ns) + "," + e.src +
           "," + e.dst + "," + std::to_string(e.src_port) + "," + std::to_string(e.dst_port) + "," +
           std::to_string(e.bytes) + "," + std::to_string(e.packets) + ",tcp\n";
  std::string topo;
  for (auto& [a, n] : in.addr_node) topo += a + " " + n + "\n";
  TempFile f(csv), t(topo);
  std::string err;
  auto loaded = load_csv(f.path, t.path, err);
  ASSERT_TRUE(loaded) << err;
  auto a = analyze(in), b = analyze(*loaded);
  ASSERT_EQ(a.jobs.size(), 1u);
  ASSERT_EQ(b.jobs.size(), 1u);
  EXPECT_EQ(a.jobs[0].nodes, b.jobs[0].nodes);
  EXPECT_EQ(a.jobs[0].parallelism.stages, b.jobs[0].parallelism.stages);
  EXPECT_EQ(a.jobs[0].parallelism.dp_groups, b.jobs[0].parallelism.dp_groups);
  EXPECT_EQ(a.jobs[0].iterations.size(), b.jobs[0].iterations.size());
}

TEST(AnalysisPerfetto, TraceEventStructure) {
  synth::Spec s;
  s.straggler_node = 1;
  s.straggler_factor = 1.4;
  s.straggler_from = 5;
  Input in;
  synth::generate(s, in);
  auto r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  const Job& j = r.jobs[0];
  auto doc = perfetto(j);
  ASSERT_TRUE(doc.contains("traceEvents"));
  ASSERT_TRUE(doc["traceEvents"].is_array());
  std::set<int> tids;
  std::set<std::string> track_names;
  size_t iter_slices = 0, phase_slices = 0, markers = 0;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph"));
    ASSERT_TRUE(e.contains("pid"));
    std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") track_names.insert(e["args"]["name"].get<std::string>());
    if (ph == "X") {
      ASSERT_TRUE(e["ts"].is_number());
      ASSERT_TRUE(e["dur"].is_number());
      EXPECT_GE(e["dur"].get<double>(), 0);
      tids.insert(e["tid"].get<int>());
      (e["cat"] == "iteration" ? iter_slices : phase_slices)++;
    }
    if (ph == "i") {
      ++markers;
      EXPECT_TRUE(e["args"].contains("evidence"));
    }
  }
  EXPECT_EQ(track_names, std::set<std::string>(j.nodes.begin(), j.nodes.end()));
  EXPECT_EQ(tids.size(), j.nodes.size());
  EXPECT_EQ(iter_slices, j.iterations.size() * j.nodes.size());
  EXPECT_GT(phase_slices, j.iterations.size());
  EXPECT_EQ(markers, j.findings.size());
  EXPECT_GE(markers, 1u);
  // Parsable by a JSON reader after dumping (what the viewer loads).
  auto reparsed = nlohmann::json::parse(doc.dump());
  EXPECT_EQ(reparsed["traceEvents"].size(), doc["traceEvents"].size());
}
