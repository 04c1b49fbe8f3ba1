// Minimal RAII over the SQLite C API: a connection and a prepared statement. Errors become exceptions
// (SqliteError) carrying SQLite's message, so callers decide in one place whether to ACK, retry or report.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace netprism::store {

struct SqliteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct DbClose {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalize {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};

class Stmt {
 public:
  Stmt() = default;
  Stmt(sqlite3* db, std::string_view sql);
  // Binding is 1-based, as in SQLite.
  Stmt& bind(int i, int64_t v);
  Stmt& bind(int i, uint64_t v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind(int i, double v);
  Stmt& bind(int i, std::string_view v);
  Stmt& bind_blob(int i, const void* p, std::size_t n);
  Stmt& bind_null(int i);
  // true while a row is available; false when done. Throws on error.
  bool step();
  // Runs to completion (for writes) and resets for the next use.
  void run();
  void reset();
  int64_t i64(int col) const { return sqlite3_column_int64(s_.get(), col); }
  double f64(int col) const { return sqlite3_column_double(s_.get(), col); }
  bool is_null(int col) const { return sqlite3_column_type(s_.get(), col) == SQLITE_NULL; }
  std::string text(int col) const;
  std::string_view blob(int col) const;

 private:
  std::unique_ptr<sqlite3_stmt, StmtFinalize> s_;
  sqlite3* db_ = nullptr;
};

class Db {
 public:
  enum class Mode { kReadWrite, kReadOnly };
  // vfs: an SQLite VFS name (nullptr: the default one).
  Db(const std::string& path, Mode mode, const char* vfs = nullptr);
  sqlite3* get() const { return db_.get(); }
  void exec(std::string_view sql);
  Stmt prepare(std::string_view sql) { return Stmt(db_.get(), sql); }
  int64_t changes() const { return sqlite3_changes64(db_.get()); }

 private:
  std::unique_ptr<sqlite3, DbClose> db_;
};

// BEGIN IMMEDIATE ... COMMIT; rolls back if destroyed without commit() (an exception on the way).
class Transaction {
 public:
  explicit Transaction(Db& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Db& db_;
  bool done_ = false;
};

}  // namespace netprism::store
