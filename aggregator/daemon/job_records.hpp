// Analysed jobs in and out of the store (store/job_history.hpp) for the live analysis and the query server.
//
// JobWriter: the live analysis' writes. It remembers, per job in the live view, what it wrote last, so a
// write is the job's head row plus only the iterations and findings that are new or changed -- a cost
// proportional to what changed, not to the job's length. A job that leaves the live view is written one
// last time as retired and forgotten (its memory is freed; queries read it from the store).
//
// After a restart the analysis sees only its window of stored batches again, so a running job's history
// restarts inside that window: its iterations are written after the stored ones that began before the
// window's first iteration (`base`), so the stored history continues rather than starting over.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "analysis.hpp"
#include "job_history.hpp"
#include "store.hpp"

namespace netprism::daemon {

class JobWriter {
 public:
  // Writes what changed of j since its last write, in one transaction. retired: the job left the live view
  // (written once more, then forgotten here).
  void write(store::Store& st, const analysis::Job& j, uint64_t now_ns, bool retired);
  // A job the analysis regrouped (superseded while still inside its window): its rows are deleted.
  void remove(store::Store& st, const std::string& id);
  // Rows re-checked on every write: the engine re-analyses a job's tail (at least 16 iterations and 30 s of
  // traffic, incremental.hpp), 60 iterations at the target's shortest step (0.5 s); earlier iterations are
  // settled and never change. 512 leaves a wide margin for 16 KiB per job.
  static constexpr std::size_t kRecheckIterations = 512;

 private:
  using FindingKey = std::tuple<std::string, std::string, int64_t>;  // kind, subject, first_iteration
  struct Mark {
    bool based = false;
    int64_t base = 0;                        // stored index of the analysis' iteration 0
    int64_t stored = 0;                      // iterations the store holds for the job (indices [0, stored))
    int64_t fresh_from = 0;                  // stored index from which this process has not written rows yet
    std::deque<store::IterationRow> recent;  // the last rows written (at most kRecheckIterations)
    std::map<FindingKey, store::FindingRow> findings;
    std::string head;  // the head document last written
    bool loaded = false;
  };
  void write_iterations(store::JobHistory& h, const analysis::Job& j, Mark& m);
  void write_findings(store::JobHistory& h, const analysis::Job& j, Mark& m);
  std::map<std::string, Mark> marks_;
};

// ---- query answers for jobs not in the live snapshot (retired, or not analysed since a restart) ----

// The `jobs` document: live jobs first, then stored ones most recently active first, at most limit of those
// (`stored_jobs_total` counts them all).
nlohmann::json jobs_document(const std::vector<analysis::Job>& live, store::Store& reader, std::size_t limit);
// `job`, `timeline`, `diagnose`, `perfetto` of a stored job; nullopt: no such job. Iterations with index >
// after, at most limit (timeline: `next_from` names where the next page starts when there are more).
std::optional<nlohmann::json> stored_job_document(store::Store& reader, const std::string& cmd,
                                                  const std::string& id, int64_t after, std::size_t limit);

}  // namespace netprism::daemon
