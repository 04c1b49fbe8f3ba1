// WAL checkpoints off the ingest writer's commit path.
//
// SQLite's default (wal_autocheckpoint) runs a checkpoint inside the COMMIT that takes the WAL past 1000
// pages: it copies the WAL into the database file and fsyncs both, on the committing thread. For ingest that
// roughly doubled the time of one commit in ten and, since ACKs wait for the commit, the whole ingest rate
// (bench/ingest: commits took 0.37 s of a 0.75 s run with it, 0.19 s without). Here the writer's
// autocheckpoint is off and a thread with its own connection runs the same PASSIVE checkpoint once the
// writer reports (sqlite3_wal_hook, after each commit) that the WAL holds at least as many pages not yet
// copied, then a RESTART checkpoint for the rest so the WAL is reused from its start (see loop()). Durability
// does not change: a commit is durable once its own WAL fsync returns (synchronous=FULL); checkpoints only
// copy committed pages into the database file and bound the WAL's size.
#pragma once

#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "sqlite.hpp"

namespace netprism::store {

class Checkpointer {
 public:
  // writer: the connection whose commits fill the WAL (it must outlive this object); db_path: the database
  // file, opened again for the checkpoints. threshold_pages: SQLite's own autocheckpoint default.
  Checkpointer(Db& writer, const std::string& db_path, int threshold_pages = 1000);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  uint64_t checkpoints() const;  // PASSIVE checkpoints run so far

 private:
  static int on_commit(void* self, sqlite3* db, const char* name, int wal_pages);
  void loop(std::stop_token stop);

  Db& writer_;
  Db own_;
  const int threshold_;
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  bool due_ = false;
  int backfilled_ = 0;  // WAL pages the last checkpoint had copied
  uint64_t runs_ = 0;
  std::jthread thread_;  // last: started after everything it uses exists, joined before it goes
};

}  // namespace netprism::store
