// The analysis' output boundary (json.cpp): a job's `full` document, as the daemon stores it, reads back into
// the same job (the fields the document carries), and reads tolerantly.
#include <gtest/gtest.h>

#include "analysis.hpp"
#include "synth.hpp"

using namespace netprism::analysis;

TEST(AnalysisJson, FullDocumentReadsBackIntoTheSameJob) {
  synth::Spec s;
  s.dp = 2;
  s.pp = 2;
  s.iters = 16;
  s.straggler_node = 1;
  s.straggler_factor = 2.0;
  s.straggler_from = 6;
  Input in;
  synth::generate(s, in);
  Result r = analyze(in);
  ASSERT_EQ(r.jobs.size(), 1u);
  const Job& j = r.jobs[0];
  ASSERT_FALSE(j.findings.empty());
  ASSERT_FALSE(j.iterations.empty());
  nlohmann::json doc = full(j);
  Job back = job_from_json(doc);
  // The reader does not take tp_hint and ep back (it never did: a restarted daemon shows 0 for them on the
  // jobs it reloads); kept so by the refactoring that moved the reader next to the writer, which changes no
  // behaviour.
  doc["parallelism"].erase("tp_hint");
  doc["parallelism"].erase("ep");
  nlohmann::json again = full(back);
  again["parallelism"].erase("tp_hint");
  again["parallelism"].erase("ep");
  EXPECT_EQ(again, doc);
  EXPECT_EQ(back.id, j.id);
  EXPECT_EQ(back.parallelism.dp_groups, j.parallelism.dp_groups);
  ASSERT_EQ(back.findings.size(), j.findings.size());
  EXPECT_EQ(back.findings[0].whatif_step_time_ms, j.findings[0].whatif_step_time_ms);
}

TEST(AnalysisJson, MissingFieldsTakeDefaultsAndUnknownOnesAreIgnored) {
  Job j = job_from_json({{"id", "j1"}, {"future_field", 3}, {"iterations", {{{"index", 2}}}}});
  EXPECT_EQ(j.id, "j1");
  EXPECT_EQ(j.state, "ended");
  EXPECT_EQ(j.parallelism.dp, 1);
  ASSERT_EQ(j.iterations.size(), 1u);
  EXPECT_EQ(j.iterations[0].index, 2);
  EXPECT_EQ(j.iterations[0].start_ns, 0u);
  EXPECT_TRUE(j.findings.empty());
}
