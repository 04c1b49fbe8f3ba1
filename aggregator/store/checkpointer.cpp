#include "checkpointer.hpp"

#include <pthread.h>

#include "write_coalescing_vfs.hpp"

namespace netprism::store {

Checkpointer::Checkpointer(Db& writer, const std::string& db_path, int threshold_pages)
    // Through the write-coalescing VFS: a checkpoint copies page by page, and its copies are flushed by the
    // file control that ends the copy, before the checkpoint records them (write_coalescing_vfs.hpp).
    : writer_(writer),
      own_(db_path, Db::Mode::kReadWrite, write_coalescing_vfs()),
      threshold_(threshold_pages) {
  // A connection reads the database header (and learns it is in WAL mode) only with its first statement;
  // until then sqlite3_wal_checkpoint_v2() on it does nothing.
  own_.exec("SELECT count(*) FROM sqlite_master");
  // RESTART waits this long at most for readers and the writer's current transaction (one commit takes a
  // few ms), holding new writers back meanwhile: short, so ingest never stalls on it for long.
  sqlite3_busy_timeout(own_.get(), 20);
  // sqlite3_wal_hook replaces the autocheckpoint hook (the autocheckpoint is implemented with it).
  sqlite3_wal_hook(writer_.get(), &Checkpointer::on_commit, this);
  thread_ = std::jthread([this](std::stop_token st) { loop(st); });
}

Checkpointer::~Checkpointer() {
  // Back to SQLite's own behaviour for whatever the writer still commits after us.
  sqlite3_wal_autocheckpoint(writer_.get(), threshold_);
  thread_.request_stop();
  cv_.notify_all();
}

uint64_t Checkpointer::checkpoints() const {
  std::lock_guard lk(mu_);
  return runs_;
}

int Checkpointer::on_commit(void* self, sqlite3*, const char*, int wal_pages) {
  auto* c = static_cast<Checkpointer*>(self);
  bool wake = false;
  {
    std::lock_guard lk(c->mu_);
    // The WAL starts over from its first page once everything was copied and no reader still uses it.
    if (wal_pages < c->backfilled_) c->backfilled_ = 0;
    // Pages not yet copied, not the WAL's length: a WAL that cannot start over (a reader holds an old
    // snapshot) would otherwise ask for a checkpoint -- two more fsyncs -- after every single commit.
    if (wal_pages - c->backfilled_ >= c->threshold_ && !c->due_) wake = c->due_ = true;
  }
  if (wake) c->cv_.notify_one();
  return SQLITE_OK;
}

void Checkpointer::loop(std::stop_token stop) {
  ::pthread_setname_np(::pthread_self(), "np-checkpoint");
  for (;;) {
    {
      std::unique_lock lk(mu_);
      if (!cv_.wait(lk, stop, [&] { return due_; })) return;  // stop requested
      due_ = false;
    }
    int log = 0, done = 0;
    // SQLITE_BUSY (another checkpoint is running, e.g. the analysis connection's own autocheckpoint) is
    // fine: the WAL is being copied anyway, and the next commit past the threshold asks again.
    sqlite3_wal_checkpoint_v2(own_.get(), nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    // Then RESTART: copies the few frames committed meanwhile and makes the next commit write the WAL from
    // its start again. Under continuous ingest a PASSIVE checkpoint never catches up with the writer, so
    // the WAL would only ever grow -- and appending costs the file system a block allocation per page and
    // each commit's fsync an inode update (fdatasync of an overwrite: ~0.2 ms here; of an append: 1-6 ms).
    // RESTART holds new writers back while it runs, which the connection's short busy timeout bounds; if
    // readers keep it from finishing it returns SQLITE_BUSY and the next checkpoint tries again.
    if (sqlite3_wal_checkpoint_v2(own_.get(), nullptr, SQLITE_CHECKPOINT_RESTART, &log, &done) == SQLITE_OK)
      done = 0;  // the WAL starts over
    std::lock_guard lk(mu_);
    runs_++;
    if (done > 0) backfilled_ = done;
  }
}

}  // namespace netprism::store
