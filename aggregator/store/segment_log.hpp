// Append-only segment files for the bytes of stored batches, beside the SQLite database
// (`<database>-segments/<number>.seg`).
//
// Why outside SQLite: a batch row with its ~5 KB blob inline costs SQLite two pages (a leaf and an overflow
// page), written once to the WAL, checksummed, and written again by the checkpoint -- on the ingest bench
// that was ~60 ns of the daemon's ~330 ns per record, and the doubled write-back kept the CPU waiting on
// the disk. Here the blob is written once, appended, and the row carries only (segment, offset, length).
//
// Durability: the writer stages each fresh blob while its row is inserted; before the transaction commits,
// flush() writes the staged bytes and fdatasync()s the segment (and the directory, for a new file), so a
// committed row never points at bytes the disk may not have. A failed flush or commit leaves bytes that no
// committed row references; the next transaction writes over them (offsets restart from the last commit) --
// unless the flush succeeded and only the COMMIT failed, which SQLite's recovery might still replay: then the
// next transaction starts a new segment.
//
// One writer per data dir (the daemon's ingest committer); readers (the query server, the analysis, the
// offline CLI) only pread() at offsets committed rows name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "netprism/fd.hpp"

namespace netprism::store {

class SegmentLog {
 public:
  // dir: the segment directory (created by the writer). segment_bytes: a segment is closed once it holds
  // this much (the unit in which retention hands space back to the file system).
  SegmentLog(std::string dir, uint64_t segment_bytes);

  static std::string dir_for(const std::string& db_file) { return db_file + "-segments"; }
  std::string path_of(uint64_t seg) const;
  const std::string& dir() const { return dir_; }

  // ---- writer ----
  // Starts writing at a new segment numbered after `last_seg` (every start begins a fresh file, so bytes a
  // crashed process left past its last commit are never appended to).
  void start_after(uint64_t last_seg);
  struct Place {
    uint64_t seg = 0, off = 0;
    bool first_in_seg = false;  // the first blob of its segment: the caller registers the segment
  };
  // Where a blob of len bytes goes if stage() follows; no effect by itself.
  Place place(uint64_t len) const;
  // Stages the blob at place(blob.size()) (copied: it need not outlive the call).
  void stage(std::string_view blob);
  // Writes and syncs everything staged. On failure returns false with err set; the staged bytes stay
  // staged until committed() or rolled_back().
  bool flush(std::string& err);
  bool flushed() const { return staged_.empty() || flushed_; }
  void committed();  // the transaction that referenced the staged blobs committed
  // ... did not: offsets go back to the last commit, or on to a new segment when the staged bytes were
  // already flushed (see rolled_back()).
  void rolled_back();
  uint64_t current_seg() const { return seg_; }

  // ---- readers (any process) ----
  // The blob at (seg, off, len) into out; false with err set when it cannot be read (a missing file means
  // retention deleted the segment after the reader's snapshot was taken).
  bool read(uint64_t seg, uint64_t off, uint64_t len, std::string& out, std::string& err);
  void close_readers() { read_fds_.clear(); }

  // Numbers of the segment files present in dir (unsorted).
  std::vector<uint64_t> files() const;

 private:
  std::string dir_;
  uint64_t segment_bytes_;
  // Committed state: the segment being written and where its next blob goes.
  uint64_t seg_ = 0, end_ = 0;
  // This transaction's: where the next blob goes, and the staged bytes per segment (in order).
  uint64_t tseg_ = 0, tend_ = 0;
  struct Staged {
    uint64_t seg, off;
    std::string bytes;
  };
  std::vector<Staged> staged_;
  bool flushed_ = false;
  struct Writer {
    Fd fd;
    bool name_synced;  // its directory entry is durable
  };
  std::map<uint64_t, Writer> write_fds_;  // segments this writer appends to (at most the current two)
  std::map<uint64_t, Fd> read_fds_;  // during one scan (readers scan in time order, few segments at once)
};

}  // namespace netprism::store
