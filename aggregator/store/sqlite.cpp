#include "sqlite.hpp"

#include <unistd.h>

namespace netprism::store {

namespace {
[[noreturn]] void fail(sqlite3* db, const std::string& what) {
  throw SqliteError(what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}
}  // namespace

Stmt::Stmt(sqlite3* db, std::string_view sql) : db_(db) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &s, nullptr) != SQLITE_OK)
    fail(db, "prepare '" + std::string(sql.substr(0, 60)) + "'");
  s_.reset(s);
}

Stmt& Stmt::bind(int i, int64_t v) {
  if (sqlite3_bind_int64(s_.get(), i, v) != SQLITE_OK) fail(db_, "bind");
  return *this;
}
Stmt& Stmt::bind(int i, double v) {
  if (sqlite3_bind_double(s_.get(), i, v) != SQLITE_OK) fail(db_, "bind");
  return *this;
}
Stmt& Stmt::bind(int i, std::string_view v) {
  if (sqlite3_bind_text64(s_.get(), i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8) != SQLITE_OK)
    fail(db_, "bind");
  return *this;
}
Stmt& Stmt::bind_blob(int i, const void* p, std::size_t n) {
  // SQLITE_STATIC: callers keep the bytes alive until step() returns, which saves a copy on the ingest path.
  if (sqlite3_bind_blob64(s_.get(), i, p, n, SQLITE_STATIC) != SQLITE_OK) fail(db_, "bind");
  return *this;
}
Stmt& Stmt::bind_null(int i) {
  if (sqlite3_bind_null(s_.get(), i) != SQLITE_OK) fail(db_, "bind");
  return *this;
}

bool Stmt::step() {
  int rc = sqlite3_step(s_.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  std::string msg = sqlite3_errmsg(db_);
  sqlite3_reset(s_.get());
  throw SqliteError("step: " + msg);
}

void Stmt::run() {
  while (step()) {
  }
  reset();
}

void Stmt::reset() {
  sqlite3_reset(s_.get());
  sqlite3_clear_bindings(s_.get());
}

std::string Stmt::text(int col) const {
  const auto* p = sqlite3_column_text(s_.get(), col);
  return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(s_.get(), col))
           : std::string();
}

std::string_view Stmt::blob(int col) const {
  const void* p = sqlite3_column_blob(s_.get(), col);
  return p ? std::string_view(static_cast<const char*>(p), sqlite3_column_bytes(s_.get(), col))
           : std::string_view();
}

Db::Db(const std::string& path, Mode mode, const char* vfs) {
  sqlite3* db = nullptr;
  int flags = mode == Mode::kReadOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  flags |= SQLITE_OPEN_NOMUTEX;  // one connection per thread
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, vfs);
  db_.reset(db);
  if (rc != SQLITE_OK) fail(db, "open " + path);
  // Readers and the writers (ingest, retention, analysis) run in different threads (and the CLI in another
  // process): wait for locks rather than fail; 5 s is far above any commit this store makes. Polled every
  // 250 us rather than by SQLite's default back-off (which sleeps up to 100 ms per try): the ingest
  // committer waiting for one of retention's short transactions must get the lock as soon as it is free,
  // since its ACKs wait for it.
  sqlite3_busy_handler(
      db,
      [](void*, int tries) {
        if (tries >= 20000) return 0;  // 20,000 x 250 us = 5 s
        ::usleep(250);
        return 1;
      },
      nullptr);
}

void Db::exec(std::string_view sql) {
  char* err = nullptr;
  std::string s(sql);
  if (sqlite3_exec(db_.get(), s.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw SqliteError(msg);
  }
}

Transaction::Transaction(Db& db) : db_(db) {
  db_.exec("BEGIN IMMEDIATE");
}
Transaction::~Transaction() {
  if (!done_) {
    try {
      db_.exec("ROLLBACK");
    } catch (...) {  // nothing more to do: SQLite rolls back on its own when the connection closes
    }
  }
}
void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace netprism::store
