// The analysis' debug output goes to the sink a binary installs (debug_log.hpp), never into the results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "debug_log.hpp"
#include "synth.hpp"

using namespace netprism::analysis;

namespace {

// Installs a capturing sink for one test and restores the library's default (what the environment asks
// for), also when the test fails.
class CaptureSink {
 public:
  CaptureSink() {
    debug::set_sink({[this](std::string_view l) { lines.emplace_back(l); },
                     [this](std::string_view name, std::string_view csv) { dumps.emplace_back(name, csv); }});
  }
  ~CaptureSink() { debug::set_sink(debug::sink_from_env()); }
  CaptureSink(const CaptureSink&) = delete;
  CaptureSink& operator=(const CaptureSink&) = delete;
  std::vector<std::string> lines;
  std::vector<std::pair<std::string, std::string>> dumps;
};

size_t count_prefix(const std::vector<std::string>& lines, const std::string& prefix) {
  size_t n = 0;
  for (const auto& l : lines) n += l.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

}  // namespace

TEST(AnalysisDebugLog, StagesWriteToTheInstalledSinkOnly) {
  synth::Spec spec;  // DP2 x PP2: two DP groups, one per stage
  Input in;
  synth::generate(spec, in);
  Result quiet = analyze(in);
  ASSERT_EQ(quiet.jobs.size(), 1u);
  CaptureSink sink;
  ASSERT_TRUE(debug::lines_on());
  ASSERT_TRUE(debug::dumps_on());
  Result loud = analyze(in);
  // Debug output changes nothing of the result.
  ASSERT_EQ(loud.jobs.size(), 1u);
  EXPECT_EQ(loud.jobs[0].iterations.size(), quiet.jobs[0].iterations.size());
  for (size_t i = 0; i < loud.jobs[0].iterations.size(); ++i)
    EXPECT_EQ(loud.jobs[0].iterations[i].end_ns, quiet.jobs[0].iterations[i].end_ns);
  // Each DP group's detection and pairing, and the slot table: one line per reference slot.
  EXPECT_GE(count_prefix(sink.lines, "group 0: "), 2u);
  EXPECT_GE(count_prefix(sink.lines, "group 1: "), 2u);
  EXPECT_EQ(count_prefix(sink.lines, "timeline: step "), 1u);
  EXPECT_GE(count_prefix(sink.lines, "  slot "), quiet.jobs[0].iterations.size());
  for (const auto& l : sink.lines) EXPECT_EQ(l.find('\n'), std::string::npos) << l;
  // One dump per job, named by its first node: a header and one row per transfer.
  ASSERT_EQ(sink.dumps.size(), 1u);
  EXPECT_EQ(sink.dumps[0].first, synth::node_name(spec, 0));
  const std::string& csv = sink.dumps[0].second;
  EXPECT_EQ(csv.rfind("kind,src,dst,src_stage,dst_stage,t0,t1,bytes\n", 0), 0u);
  EXPECT_GT(std::count(csv.begin(), csv.end(), '\n'), 100);
}

TEST(AnalysisDebugLog, OffByDefault) {
  // The test binary runs without NP_ANALYSIS_DEBUG / NP_ANALYSIS_DUMP (ctest's environment): both off.
  if (std::getenv("NP_ANALYSIS_DEBUG") || std::getenv("NP_ANALYSIS_DUMP")) GTEST_SKIP() << "debug env set";
  EXPECT_FALSE(debug::lines_on());
  EXPECT_FALSE(debug::dumps_on());
  debug::line("dropped");  // no sink: nothing happens
  debug::dump("n0", "x\n");
}

TEST(AnalysisDebugLog, AppendfFormatsLongLines) {
  std::string s = "a";
  debug::appendf(s, " %d %s", 42, std::string(300, 'x').c_str());
  EXPECT_EQ(s, "a 42 " + std::string(300, 'x'));
  debug::appendf(s, "%s", "");
  EXPECT_EQ(s.size(), 305u);
}
