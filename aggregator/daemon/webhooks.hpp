// Webhooks: on each new finding and each job state change, a JSON document is POSTed to every configured URL
// (settings: --webhook URL, config webhooks.urls).
//
// Changes are found by comparing successive analysis snapshots on a thread of their own, so nothing here
// ever runs on, or waits for, the ingest path. Every URL has its own sender thread and bounded queue: a slow
// or dead receiver delays only its own deliveries; when its queue is full the oldest event is dropped and
// counted. A failed POST is retried with exponential back-off; each event carries a unique `id` so a
// receiver can discard the rare duplicate (a POST that arrived but whose answer was lost is resent).
//
// Documents: {"event": "finding", "id", "aggregator_ns", "job", "job_state", "finding": {the `diagnose`
// entry}} and {"event": "job_state", "id", "aggregator_ns", "job", "state", "previous" (null for a new job),
// "summary": {the `jobs` entry}}.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis.hpp"
#include "live_analysis.hpp"

namespace netprism::daemon {

// What changed between the jobs it saw last and these (pure bookkeeping, no I/O). A finding is new the
// first time its (job, kind, subject) is seen -- slow iterations also by their first iteration, as a job
// has many; the analysis refines a straggler's evidence and severity pass after pass, which is not news.
// Only the jobs of the latest call are remembered (the snapshot's jobs, bounded by the daemon's retention):
// a job the analysis dropped is forgotten with its findings.
class ChangeTracker {
 public:
  // Seeds with the jobs known at start (persisted ones): those are not announced again after a restart.
  explicit ChangeTracker(const std::vector<analysis::Job>& initial);
  // The events (without id and aggregator_ns) for these jobs, in job order, state changes first.
  std::vector<nlohmann::json> changes(const std::vector<analysis::Job>& jobs);

 private:
  static std::string finding_key(const analysis::Finding& f);
  struct Known {
    std::string state;
    std::set<std::string> findings;  // keys of the findings announced
  };
  std::map<std::string, Known> jobs_;
};

class Webhooks {
 public:
  Webhooks(const std::vector<std::string>& urls, LiveAnalysis& live);  // throws on a malformed URL
  ~Webhooks();
  Webhooks(const Webhooks&) = delete;
  Webhooks& operator=(const Webhooks&) = delete;
  void run(std::stop_token stop);  // watches snapshots; the senders run on their own threads

  struct Sender;

 private:
  LiveAnalysis& live_;
  ChangeTracker tracker_;
  std::vector<std::unique_ptr<Sender>> senders_;
  uint64_t next_id_ = 1;
  uint64_t boot_ns_;
};

}  // namespace netprism::daemon
