// Bounded job history (issue 20): the live analysis writes a job's new and changed iterations and findings
// only (not the whole history), a write repeated after a restart changes nothing and continues the stored
// history, retired jobs leave memory and are still answered from the store (paged), and stores with the
// older layout (whole documents) still read. Real SQLite.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "job_history.hpp"
#include "daemon/job_records.hpp"
#include "store.hpp"

using namespace netprism;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kSec = 1000000000ull;

struct TmpDir {
  std::string path = [] {
    auto p = fs::temp_directory_path() /
             ("np_jobhist_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(p);
    return p.string();
  }();
  ~TmpDir() { fs::remove_all(path); }
};

// A job with iterations [from, to) of 1 s each (start at t0 + i s), one straggler finding.
analysis::Job job(int from, int to, uint64_t t0 = 1000 * kSec) {
  analysis::Job j;
  j.id = "job-ab";
  j.nodes = {"a", "b"};
  j.state = "running";
  j.step_time_ms = 1000;
  j.parallelism.dp = 2;
  j.parallelism.dp_groups = {{"a", "b"}};
  for (int i = from; i < to; ++i) {
    analysis::Iteration it;
    it.index = i - from;
    it.start_ns = t0 + static_cast<uint64_t>(i) * kSec;
    it.end_ns = it.start_ns + kSec;
    it.duration_ns = kSec;
    j.iterations.push_back(it);
  }
  j.first_ns = t0 + static_cast<uint64_t>(from) * kSec;
  j.last_ns = t0 + static_cast<uint64_t>(to) * kSec;
  j.findings.push_back({"straggler", "b", 3, t0 + 3 * kSec, 0.2, "b is late", 900.0});
  return j;
}

int64_t changes(store::Store& s) {
  return sqlite3_total_changes64(s.db().get());
}

std::vector<store::IterationRow> all_rows(store::Store& s) {
  return store::JobHistory(s.db()).iterations("job-ab", -1, SIZE_MAX);
}

TEST(JobHistory, AWriteIsWhatChangedNotTheWholeHistory) {
  TmpDir d;
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  daemon::JobWriter w;
  w.write(s, job(0, 2000), 1, false);
  ASSERT_EQ(all_rows(s).size(), 2000u);
  int64_t before = changes(s);
  w.write(s, job(0, 2003), 2, false);  // three new iterations
  EXPECT_LE(changes(s) - before, 4) << "3 iteration rows + the head row";
  before = changes(s);
  w.write(s, job(0, 2003), 3, false);  // nothing new
  EXPECT_EQ(changes(s) - before, 0);
  // The engine revised its tail: the last iteration ends later, the one before is gone (regrouped).
  auto revised = job(0, 2002);
  revised.iterations.back().end_ns += kSec / 2;
  revised.iterations.back().duration_ns += kSec / 2;
  before = changes(s);
  w.write(s, revised, 4, false);
  EXPECT_LE(changes(s) - before, 3) << "one row updated, one deleted, the head";
  auto rows = all_rows(s);
  ASSERT_EQ(rows.size(), 2002u);
  EXPECT_EQ(rows.back().duration_ns, kSec + kSec / 2);
  for (std::size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows[i].index, static_cast<int64_t>(i));
  auto head = store::JobHistory(s.db()).head("job-ab");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->iterations, 2002u);
  EXPECT_FALSE(head->doc.contains("findings")) << "the head is a summary, not the history";
  auto fs = store::JobHistory(s.db()).findings("job-ab", 10);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].whatif_step_time_ms, 900.0);
}

TEST(JobHistory, ARestartContinuesTheStoredHistoryAndRewritesNothingSettled) {
  TmpDir d;
  {
    store::Store s(d.path, store::Db::Mode::kReadWrite);
    daemon::JobWriter w;
    w.write(s, job(0, 1000), 1, false);
  }
  // The restarted analysis sees only its window again: iterations 900..1004, numbered from 0.
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  daemon::JobWriter w;
  const int64_t before = changes(s);
  w.write(s, job(900, 1005), 2, false);
  EXPECT_LE(changes(s) - before, 105 + 2) << "the window's rows (same values) and the new ones, no more";
  auto rows = all_rows(s);
  ASSERT_EQ(rows.size(), 1005u);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].index, static_cast<int64_t>(i));
    ASSERT_EQ(rows[i].start_ns, 1000 * kSec + i * kSec) << i;
  }
  EXPECT_EQ(store::JobHistory(s.db()).head("job-ab")->iterations, 1005u);
  // The finding's first_iteration is on the stored numbering too (900 + 3).
  auto fs = store::JobHistory(s.db()).findings("job-ab", 10);
  ASSERT_FALSE(fs.empty());
  EXPECT_EQ(fs.back().first_iteration, 903);
}

TEST(JobHistory, RetiredJobsAreAnsweredFromTheStorePaged) {
  TmpDir d;
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  daemon::JobWriter w;
  w.write(s, job(0, 250), 1, false);
  w.write(s, job(0, 250), 2, true);  // left the analysis
  store::Store reader(d.path, store::Db::Mode::kReadOnly);
  auto jobs = daemon::jobs_document({}, reader, 10);
  ASSERT_EQ(jobs["jobs"].size(), 1u);
  EXPECT_EQ(jobs["jobs"][0]["id"], "job-ab");
  EXPECT_EQ(jobs["jobs"][0]["state"], "ended") << "retired while running: it ended";
  EXPECT_EQ(jobs["jobs"][0]["iterations"], 250);
  EXPECT_EQ(jobs["stored_jobs_total"], 1);
  // A live job of the same id is listed once, from the live view.
  EXPECT_EQ(daemon::jobs_document({job(0, 3)}, reader, 10)["jobs"].size(), 1u);
  EXPECT_EQ(daemon::jobs_document({}, reader, 0)["jobs"].size(), 0u) << "bounded by the limit";
  auto detail = daemon::stored_job_document(reader, "job", "job-ab", -1, 10);
  ASSERT_TRUE(detail);
  EXPECT_EQ((*detail)["parallelism"]["dp"], 2);
  EXPECT_EQ((*detail)["nodes"], (std::vector<std::string>{"a", "b"}));
  // Pages of 100: 0..99, 100..199, 200..249.
  std::vector<int64_t> seen;
  int64_t after = -1;
  for (int page = 0; page < 5; ++page) {
    auto t = daemon::stored_job_document(reader, "timeline", "job-ab", after, 100);
    ASSERT_TRUE(t);
    for (const auto& it : (*t)["iterations"]) seen.push_back(it["index"]);
    if (!t->contains("next_from")) break;
    after = (*t)["next_from"].get<int64_t>() - 1;
  }
  ASSERT_EQ(seen.size(), 250u);
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], static_cast<int64_t>(i));
  auto diag = daemon::stored_job_document(reader, "diagnose", "job-ab", -1, 10);
  ASSERT_TRUE(diag);
  ASSERT_EQ((*diag)["findings"].size(), 1u);
  EXPECT_EQ((*diag)["findings"][0]["kind"], "straggler");
  EXPECT_FALSE(daemon::stored_job_document(reader, "timeline", "nope", -1, 10));
}

TEST(JobHistory, StoresWithWholeJobDocumentsStillRead) {
  TmpDir d;
  {  // The layout before: no retired/iterations/last_ns columns, findings without whatif, repeated keys.
    store::Db db(store::Store::resolve(d.path), store::Db::Mode::kReadWrite);
    db.exec(
        "CREATE TABLE jobs(id TEXT PRIMARY KEY, state TEXT NOT NULL, nodes TEXT NOT NULL, step_time_ms REAL "
        "NOT "
        "NULL, doc TEXT NOT NULL, updated_ns INTEGER NOT NULL);"
        "CREATE TABLE iterations(job TEXT NOT NULL, idx INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns "
        "INTEGER NOT NULL, duration_ns INTEGER NOT NULL, PRIMARY KEY(job, idx)) WITHOUT ROWID;"
        "CREATE TABLE findings(job TEXT NOT NULL, kind TEXT NOT NULL, subject TEXT NOT NULL, first_iteration "
        "INTEGER NOT NULL, start_ns INTEGER NOT NULL, severity REAL NOT NULL, evidence TEXT NOT NULL);"
        "INSERT INTO jobs VALUES('old','hung','[\"x\"]',5.0,'{\"id\":\"old\",\"nodes\":[\"x\"],\"state\":"
        "\"hung\",\"iterations\":[{\"index\":0},{\"index\":1}],\"findings\":[{\"kind\":\"hang\"}]}',7);"
        "INSERT INTO iterations VALUES('old',0,1,2,1),('old',1,2,3,1);"
        "INSERT INTO findings VALUES('old','hang','old',1,2,1.0,'e1'),('old','hang','old',1,2,1.0,'e2')");
  }
  store::Store s(d.path, store::Db::Mode::kReadWrite);
  store::JobHistory h(s.db());
  auto head = h.head("old");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->iterations, 2u);
  EXPECT_EQ(head->doc["iterations"], 2);
  EXPECT_EQ(head->doc["state"], "hung");
  auto fs = h.findings("old", 10);
  ASSERT_EQ(fs.size(), 1u) << "repeated keys collapse to the last";
  EXPECT_EQ(fs[0].evidence, "e2");
  auto t = daemon::stored_job_document(s, "timeline", "old", -1, 10);
  ASSERT_TRUE(t);
  EXPECT_EQ((*t)["iterations"].size(), 2u);
}

}  // namespace
