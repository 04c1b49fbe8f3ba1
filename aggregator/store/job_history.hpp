// Analysed jobs in the store, written incrementally (issue 20 "bounded history").
//
// `jobs` holds one head row per job: its summary document (id, nodes, state, step time, parallelism, first/
// last transfer -- no iterations, no findings), the total iteration count, whether it is retired (ended and
// out of the live view's memory) and when it was written. `iterations` holds one row per iteration keyed by
// (job, index) and `findings` one per (job, kind, subject, first_iteration): the daemon writes only the rows
// that are new or changed since its last write (upserts, so a write repeated after a restart changes
// nothing), never the whole history. Reads are bounded: heads newest first up to a limit, iterations a page
// at a time.
//
// Stores from before this layout (one whole document per job in `jobs.doc`, iterations and findings
// rewritten with it) are read as they are: their extra document fields are ignored, the new columns are
// added in place and filled from the rows already there.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sqlite.hpp"

namespace netprism::store {

struct IterationRow {
  int64_t index = 0;
  uint64_t start_ns = 0, end_ns = 0, duration_ns = 0;
  bool operator==(const IterationRow&) const = default;
};

struct FindingRow {
  std::string kind, subject;
  int64_t first_iteration = 0;
  uint64_t start_ns = 0;
  double severity = 0;
  std::string evidence;
  std::optional<double> whatif_step_time_ms;
  bool operator==(const FindingRow&) const = default;
};

struct JobHead {
  std::string id;
  nlohmann::json doc;  // the summary document (contracts.md `jobs` entry + parallelism, first/last_ns)
  uint64_t iterations = 0;
  uint64_t last_ns = 0;
  bool retired = false;
};

class JobHistory {
 public:
  explicit JobHistory(Db& db) : db_(db) {}
  // The tables and, for an older store, the added columns and the findings' key (a writer, once).
  static void create_schema(Db& db);

  // ---- writes (inside the caller's transaction) ----
  void put_head(const JobHead& h, uint64_t now_ns);
  void set_retired(const std::string& id, bool retired);  // retired: "running" becomes "ended"
  void put_iterations(const std::string& job, std::span<const IterationRow> rows);  // upsert by index
  void truncate_iterations(const std::string& job, int64_t from_index);             // index >= from_index
  void put_finding(const std::string& job,
                   const FindingRow& f);  // upsert by (kind, subject, first_iteration)
  void delete_finding(const std::string& job, const FindingRow& key);
  void remove(const std::string& id);  // head, iterations, findings

  // ---- reads ----
  // Heads, most recently active (last_ns) first; retired: only retired ones / only live ones / all.
  std::vector<JobHead> heads(std::optional<bool> retired, std::size_t limit);
  uint64_t count(std::optional<bool> retired);
  std::optional<JobHead> head(const std::string& id);
  // Iterations with index > after_index, in order, at most limit.
  std::vector<IterationRow> iterations(const std::string& job, int64_t after_index, std::size_t limit);
  // How many stored iterations of the job start before start_ns (where a restarted analysis continues).
  int64_t iterations_before(const std::string& job, uint64_t start_ns);
  std::vector<FindingRow> findings(const std::string& job, std::size_t limit);

 private:
  JobHead head_of(const Stmt& s) const;
  Db& db_;
};

}  // namespace netprism::store
