#include "checkpointer.hpp"

#include <pthread.h>

namespace netprism::store {

Checkpointer::Checkpointer(Db& writer, const std::string& db_path, int threshold_pages)
    : writer_(writer), own_(db_path, Db::Mode::kReadWrite), threshold_(threshold_pages) {
  // A connection reads the database header (and learns it is in WAL mode) only with its first statement;
  // until then sqlite3_wal_checkpoint_v2() on it does nothing.
  own_.exec("SELECT count(*) FROM sqlite_master");
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
    std::lock_guard lk(mu_);
    runs_++;
    if (done > 0) backfilled_ = done;
  }
}

}  // namespace netprism::store
