// The testbed's committed recordings (tests/e2e/samples/: real gloo training in network namespaces,
// captured with tcpdump at every sender), analysed offline: exact jobs, parallelism, state, iteration count
// and finding kinds/subjects. Durations against the ground truth are scored by the testbed's scorer in
// the analysis_sample_* CTest entries (score_samples.sh).
#include <gtest/gtest.h>

#include <filesystem>

#include "analysis.hpp"

using namespace netprism::analysis;

namespace {
struct Expect {
  std::string sample;
  std::vector<std::string> nodes;
  int dp, pp, tp;
  std::string state;
  size_t iterations;  // complete iterations in the truth after the first (index 0 = first seen)
  std::vector<std::pair<std::string, std::string>> findings;  // kind, subject: every finding
};

class AnalysisSamples : public ::testing::TestWithParam<Expect> {};
}  // namespace

TEST_P(AnalysisSamples, ExactStructureStateAndFindings) {
  const Expect& x = GetParam();
  std::string dir = std::string(NP_SAMPLES_DIR) + "/" + x.sample;
  if (!std::filesystem::exists(dir + "/flows.csv.gz")) GTEST_FAIL() << "missing recording " << dir;
  std::string err;
  auto in = load_csv(dir + "/flows.csv.gz", dir + "/topology.txt", err);
  ASSERT_TRUE(in) << err;
  auto r = analyze(*in);
  const Job* j = nullptr;
  for (const auto& job : r.jobs)
    if (job.nodes == x.nodes) j = &job;
  ASSERT_NE(j, nullptr) << "no job with exactly these nodes";
  EXPECT_EQ(j->parallelism.dp, x.dp);
  EXPECT_EQ(j->parallelism.pp, x.pp);
  EXPECT_EQ(j->parallelism.tp_hint, x.tp);
  // Node layout of the testbed: node index = stage * dp + dp_rank.
  std::vector<std::vector<std::string>> stages;
  for (int st = 0; st < x.pp; ++st) {
    std::vector<std::string> g;
    for (int d = 0; d < x.dp; ++d) g.push_back(x.nodes[static_cast<size_t>(st * x.dp + d)]);
    stages.push_back(g);
  }
  EXPECT_EQ(j->parallelism.stages, stages);
  if (x.dp > 1)
    EXPECT_EQ(j->parallelism.dp_groups, stages);
  else
    EXPECT_TRUE(j->parallelism.dp_groups.empty());
  EXPECT_EQ(j->state, x.state);
  EXPECT_EQ(j->iterations.size(), x.iterations);
  std::vector<std::pair<std::string, std::string>> got;
  for (const auto& f : j->findings) got.emplace_back(f.kind, f.subject);
  EXPECT_EQ(got, x.findings);
}

namespace {
const std::vector<std::string> k4 = {"n0", "n1", "n2", "n3"};
const std::vector<std::string> k4b = {"n4", "n5", "n6", "n7"};
}  // namespace

INSTANTIATE_TEST_SUITE_P(
    Recordings, AnalysisSamples,
    ::testing::Values(
        Expect{"dp2pp2_1f1b", k4, 2, 2, 1, "ended", 11, {}},
        Expect{"dp2pp2_gpipe", k4, 2, 2, 1, "ended", 11, {}},
        Expect{"dp2pp2tp2_1f1b", k4, 2, 2, 2, "ended", 11, {}},
        Expect{"dp4_1f1b", k4, 4, 1, 1, "ended", 11, {}}, Expect{"pp4_1f1b", k4, 1, 4, 1, "ended", 11, {}},
        Expect{"pp4_gpipe", k4, 1, 4, 1, "ended", 11, {}},
        Expect{"pp2_1f1b", {"n0", "n1"}, 1, 2, 1, "ended", 13, {}},
        Expect{"two_jobs", {"n0", "n1"}, 2, 1, 1, "ended", 13, {}},
        Expect{"two_jobs", {"n2", "n3"}, 1, 2, 1, "ended", 13, {}},
        Expect{"pause", k4, 2, 2, 1, "ended", 11, {}},
        Expect{"straggler", k4, 2, 2, 1, "ended", 13, {{"straggler", "n1"}}},
        Expect{"straggler_dp4", k4, 4, 1, 1, "ended", 11, {{"straggler", "n2"}}},
        Expect{"slowlink", k4, 2, 2, 1, "ended", 13, {{"slow_link", "n3<->n2"}}},
        Expect{"hang", k4, 2, 2, 1, "hung", 7, {{"hang", "n3"}}},
        Expect{"straggler_loaded", k4, 2, 2, 1, "ended", 23, {{"straggler", "n2"}}},
        // OpenMPI straggler whose late receives also slowed a link into it, after the lateness began:
        // the straggler is named, not the link.
        Expect{"mpi_straggler_late_link", k4, 4, 1, 1, "ended", 13, {{"straggler", "n1"}}},
        // OpenMPI DP2 (Horovod-style buckets) with a straggler: waiting for it makes quiets inside an
        // iteration, and a reading mixing one and two iterations once held (10 ends for 15).
        Expect{"mpi_dp2_straggler", {"n0", "n1"}, 2, 1, 1, "ended", 13, {{"straggler", "n1"}}},
        // Issue 22's alarms: healthy under CPU load, a pause under load, 2x slow host links.
        Expect{"pp4_loaded", k4, 1, 4, 1, "ended", 13, {}},
        Expect{"ddp4_loaded", k4, 4, 1, 1, "ended", 13, {}},
        Expect{"dp3pp2_loaded", {"n0", "n1", "n2", "n3", "n4", "n5"}, 3, 2, 1, "ended", 13, {}},
        Expect{"pause_dp4", k4, 4, 1, 1, "ended", 13, {}},
        Expect{"slowlink_2x", k4, 2, 2, 1, "ended", 15, {{"slow_link", "n0<->n1"}}},
        Expect{"slowlink_2x_dp4", k4, 4, 1, 1, "ended", 15, {{"slow_link", "n2->n1"}}},
        // Issue 22's fabric: two DP4 tenants over 4 leaves and 2 spines (ECMP); one leaf-spine
        // link, then all of one leaf's uplinks, at half the line rate from iteration 6: the
        // tenants' slow directions (slow_link) and the fabric element they share (fabric). Where
        // both of a node's directions (to two peers) cross the element, the job alone sees that
        // node's every direction slow: one slow_link for the node (its slowest direction) stands
        // for both, and the fabric finding names what they share across the tenants.
        Expect{
            "fabric_link", k4, 4, 1, 1, "ended", 15, {{"slow_link", "n1->n0"}, {"fabric", "leaf1<->spine0"}}},
        Expect{"fabric_link",
               k4b,
               4,
               1,
               1,
               "ended",
               15,
               {{"slow_link", "n5->n4"}, {"fabric", "leaf1<->spine0"}}},
        Expect{"fabric_leaf", k4, 4, 1, 1, "ended", 15, {{"slow_link", "n0->n3"}, {"fabric", "leaf0"}}},
        Expect{"fabric_leaf", k4b, 4, 1, 1, "ended", 15, {{"slow_link", "n4->n7"}, {"fabric", "leaf0"}}}),
    [](const auto& info) {
      return info.param.sample + (info.param.sample == "two_jobs" || info.param.sample.rfind("fabric", 0) == 0
                                      ? "_" + info.param.nodes[0]
                                      : std::string());
    });

// Issue 17: OpenMPI FSDP / ZeRO-3, all-gathers and reduce-scatters all through the step (no quiet forward
// pass); recorded on a loaded host (load ~11) and on a quiet one (load ~1: the per-collective lag recurs
// regularly there, and the period must still replace it).
INSTANTIATE_TEST_SUITE_P(Fsdp, AnalysisSamples,
                         ::testing::Values(Expect{"mpi_dp4_zero3", k4, 4, 1, 1, "ended", 13, {}},
                                           Expect{"mpi_dp4_zero3_quiet", k4, 4, 1, 1, "ended", 13, {}}),
                         [](const auto& info) { return info.param.sample; });
