#include "job_history.hpp"

#include <limits>

namespace netprism::store {

namespace {
bool has_column(Db& db, const char* table, const char* col) {
  auto q = db.prepare(std::string("SELECT 1 FROM pragma_table_info('") + table + "') WHERE name=?");
  q.bind(1, std::string_view(col));
  return q.step();
}

int64_t clamp64(uint64_t v) {
  return static_cast<int64_t>(std::min<uint64_t>(v, std::numeric_limits<int64_t>::max()));
}

const char* retired_where(std::optional<bool> retired) {
  if (!retired) return "";
  return *retired ? " WHERE retired=1" : " WHERE retired=0";
}
}  // namespace

void JobHistory::create_schema(Db& db) {
  // The tables themselves are in store.cpp's schema (they predate this layout); here what this layout adds.
  Transaction tx(db);
  if (!has_column(db, "jobs", "retired")) {
    db.exec("ALTER TABLE jobs ADD COLUMN retired INTEGER NOT NULL DEFAULT 0");
    db.exec("ALTER TABLE jobs ADD COLUMN iterations INTEGER NOT NULL DEFAULT 0");
    db.exec("ALTER TABLE jobs ADD COLUMN last_ns INTEGER NOT NULL DEFAULT 0");
    db.exec("UPDATE jobs SET iterations=(SELECT count(*) FROM iterations WHERE job=jobs.id)");
  }
  if (!has_column(db, "findings", "whatif")) {
    db.exec("ALTER TABLE findings ADD COLUMN whatif REAL");
    // Older stores rewrote a job's findings whole, so a key could repeat: keep the last of each.
    db.exec(
        "DELETE FROM findings WHERE rowid NOT IN (SELECT max(rowid) FROM findings GROUP BY job, kind, "
        "subject, "
        "first_iteration)");
  }
  db.exec(
      "CREATE UNIQUE INDEX IF NOT EXISTS findings_key ON findings(job, kind, subject, first_iteration);"
      "CREATE INDEX IF NOT EXISTS jobs_recent ON jobs(retired, last_ns)");
  tx.commit();
}

void JobHistory::put_head(const JobHead& h, uint64_t now_ns) {
  db_.prepare(
         "INSERT INTO jobs(id,state,nodes,step_time_ms,doc,updated_ns,retired,iterations,last_ns) "
         "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9) ON CONFLICT(id) DO UPDATE SET state=?2,nodes=?3,step_time_ms=?4,"
         "doc=?5,updated_ns=?6,retired=?7,iterations=?8,last_ns=?9")
      .bind(1, h.id)
      .bind(2, h.doc.value("state", ""))
      .bind(3, h.doc.value("nodes", nlohmann::json::array()).dump())
      .bind(4, h.doc.value("step_time_ms", 0.0))
      .bind(5, h.doc.dump())
      .bind(6, now_ns)
      .bind(7, h.retired ? 1 : 0)
      .bind(8, h.iterations)
      .bind(9, clamp64(h.last_ns))
      .run();
}

void JobHistory::set_retired(const std::string& id, bool retired) {
  // A job retired while "running" has ended (no traffic any more); other states are its diagnosis.
  db_.prepare(
         "UPDATE jobs SET retired=?2, state=CASE WHEN ?2=1 AND state='running' THEN 'ended' ELSE state END "
         "WHERE id=?1")
      .bind(1, id)
      .bind(2, retired ? 1 : 0)
      .run();
}

void JobHistory::put_iterations(const std::string& job, std::span<const IterationRow> rows) {
  if (rows.empty()) return;
  auto ins = db_.prepare(
      "INSERT INTO iterations(job,idx,start_ns,end_ns,duration_ns) VALUES(?,?,?,?,?) ON CONFLICT(job,idx) DO "
      "UPDATE SET start_ns=excluded.start_ns, end_ns=excluded.end_ns, duration_ns=excluded.duration_ns");
  for (const auto& r : rows) {
    ins.bind(1, job)
        .bind(2, r.index)
        .bind(3, clamp64(r.start_ns))
        .bind(4, clamp64(r.end_ns))
        .bind(5, clamp64(r.duration_ns));
    ins.run();
  }
}

void JobHistory::truncate_iterations(const std::string& job, int64_t from_index) {
  db_.prepare("DELETE FROM iterations WHERE job=? AND idx>=?").bind(1, job).bind(2, from_index).run();
}

void JobHistory::put_finding(const std::string& job, const FindingRow& f) {
  auto q = db_.prepare(
      "INSERT INTO findings(job,kind,subject,first_iteration,start_ns,severity,evidence,whatif) "
      "VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(job,kind,subject,first_iteration) DO UPDATE SET "
      "start_ns=excluded.start_ns, severity=excluded.severity, evidence=excluded.evidence, "
      "whatif=excluded.whatif");
  q.bind(1, job)
      .bind(2, f.kind)
      .bind(3, f.subject)
      .bind(4, f.first_iteration)
      .bind(5, clamp64(f.start_ns))
      .bind(6, f.severity)
      .bind(7, f.evidence);
  if (f.whatif_step_time_ms)
    q.bind(8, *f.whatif_step_time_ms);
  else
    q.bind_null(8);
  q.run();
}

void JobHistory::delete_finding(const std::string& job, const FindingRow& key) {
  db_.prepare("DELETE FROM findings WHERE job=? AND kind=? AND subject=? AND first_iteration=?")
      .bind(1, job)
      .bind(2, key.kind)
      .bind(3, key.subject)
      .bind(4, key.first_iteration)
      .run();
}

void JobHistory::remove(const std::string& id) {
  for (const char* t : {"jobs WHERE id=?", "iterations WHERE job=?", "findings WHERE job=?"})
    db_.prepare(std::string("DELETE FROM ") + t).bind(1, id).run();
}

JobHead JobHistory::head_of(const Stmt& s) const {
  JobHead h;
  h.id = s.text(0);
  h.doc = nlohmann::json::parse(s.text(1), nullptr, false);
  if (!h.doc.is_object()) h.doc = nlohmann::json::object();
  // A document of an older store holds the whole job: the head is its summary only.
  h.doc.erase("findings");
  h.iterations = static_cast<uint64_t>(s.i64(2));
  h.doc["iterations"] = h.iterations;
  h.last_ns = static_cast<uint64_t>(s.i64(3));
  h.retired = s.i64(4) != 0;
  h.doc["id"] = h.id;
  h.doc["state"] = s.text(5);  // the column: set_retired() changes it without the document
  return h;
}

std::vector<JobHead> JobHistory::heads(std::optional<bool> retired, std::size_t limit) {
  std::vector<JobHead> out;
  auto s = db_.prepare(std::string("SELECT id,doc,iterations,last_ns,retired,state FROM jobs") +
                       retired_where(retired) + " ORDER BY last_ns DESC, id LIMIT ?");
  s.bind(1, clamp64(limit));
  while (s.step()) out.push_back(head_of(s));
  return out;
}

uint64_t JobHistory::count(std::optional<bool> retired) {
  auto s = db_.prepare(std::string("SELECT count(*) FROM jobs") + retired_where(retired));
  return s.step() ? static_cast<uint64_t>(s.i64(0)) : 0;
}

std::optional<JobHead> JobHistory::head(const std::string& id) {
  auto s = db_.prepare("SELECT id,doc,iterations,last_ns,retired,state FROM jobs WHERE id=?");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return head_of(s);
}

std::vector<IterationRow> JobHistory::iterations(const std::string& job, int64_t after_index,
                                                 std::size_t limit) {
  std::vector<IterationRow> out;
  auto s = db_.prepare(
      "SELECT idx,start_ns,end_ns,duration_ns FROM iterations WHERE job=? AND idx>? ORDER BY idx LIMIT ?");
  s.bind(1, job).bind(2, after_index).bind(3, clamp64(limit));
  while (s.step())
    out.push_back({s.i64(0), static_cast<uint64_t>(s.i64(1)), static_cast<uint64_t>(s.i64(2)),
                   static_cast<uint64_t>(s.i64(3))});
  return out;
}

int64_t JobHistory::iterations_before(const std::string& job, uint64_t start_ns) {
  auto s = db_.prepare("SELECT count(*) FROM iterations WHERE job=? AND start_ns<?");
  s.bind(1, job).bind(2, clamp64(start_ns));
  return s.step() ? s.i64(0) : 0;
}

std::vector<FindingRow> JobHistory::findings(const std::string& job, std::size_t limit) {
  std::vector<FindingRow> out;
  auto s = db_.prepare(
      "SELECT kind,subject,first_iteration,start_ns,severity,evidence,whatif FROM findings WHERE job=? "
      "ORDER BY first_iteration, kind, subject LIMIT ?");
  s.bind(1, job).bind(2, clamp64(limit));
  while (s.step()) {
    FindingRow f{s.text(0), s.text(1), s.i64(2),    static_cast<uint64_t>(s.i64(3)),
                 s.f64(4),  s.text(5), std::nullopt};
    if (!s.is_null(6)) f.whatif_step_time_ms = s.f64(6);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace netprism::store
