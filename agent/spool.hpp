// The disk spool: unacknowledged batches that no longer fit in memory wait here, one file per batch, until
// the aggregator acknowledges them -- across agent restarts too. Its size is bounded; only when a new batch
// does not fit is the oldest batch dropped, and every drop is counted (batches and records) and logged.
//
// Layout: DIR/<epoch:016x>-<seq:016x>.npb, so a directory listing sorts in (epoch, seq) order (epochs grow
// across runs). Each file: a 32-byte header (magic, record count, payload length, FNV-1a checksum) and the
// batch exactly as encoded for the wire. Files are written to a temporary name, fsynced and renamed, so a
// crash leaves either the whole batch or nothing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace netprism::agent {

struct BatchKey {
  uint64_t epoch = 0;
  uint64_t seq = 0;
  auto operator<=>(const BatchKey&) const = default;
};

struct SpoolStats {
  uint64_t dropped_batches = 0;  // oldest batches removed because the spool was full
  uint64_t dropped_records = 0;
  uint64_t corrupt_files = 0;  // unreadable files found (removed; their records counted when known)
  uint64_t write_errors = 0;
};

class Spool {
 public:
  Spool(std::string dir, uint64_t max_bytes);
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  // Creates the directory if needed and indexes what an earlier run left. false + reason on failure.
  bool open(std::string& err);

  // Stores a batch. Drops the oldest batches first if it would not fit; a batch larger than the whole spool
  // is itself dropped (counted). Returns false if the batch could not be stored (full or I/O error).
  bool push(BatchKey key, const std::string& payload, uint32_t records);

  // The stored batch, checksum-verified. A corrupt file is removed and counted; nullopt then.
  std::optional<std::string> load(BatchKey key);
  bool contains(BatchKey key) const { return index_.count(key) != 0; }
  void erase(BatchKey key);

  std::optional<BatchKey> oldest() const;
  // Keys in (epoch, seq) order, for iteration while resending.
  const auto& index() const { return index_; }

  uint64_t bytes() const { return bytes_; }
  uint64_t max_bytes() const { return max_bytes_; }
  std::size_t count() const { return index_.size(); }
  uint64_t records() const { return records_; }
  const SpoolStats& stats() const { return stats_; }
  const std::string& dir() const { return dir_; }

 private:
  struct Entry {
    uint64_t file_bytes = 0;
    uint32_t records = 0;
  };
  std::string path_of(BatchKey k) const;
  void drop(BatchKey k, const char* why);

  std::string dir_;
  uint64_t max_bytes_;
  std::map<BatchKey, Entry> index_;
  uint64_t bytes_ = 0;
  uint64_t records_ = 0;
  SpoolStats stats_;
  int dir_fd_ = -1;
};

}  // namespace netprism::agent
