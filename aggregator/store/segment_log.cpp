#include "segment_log.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace netprism::store {

namespace {

std::string errno_text(const char* what, const std::string& path) {
  return fmt::format("{} {}: {}", what, path, std::strerror(errno));
}

// Syncs a directory, so that a file just created in it survives a power loss (the file's own fdatasync
// covers its contents, not its name).
bool sync_dir(const std::string& dir, std::string& err) {
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() < 0 || ::fsync(d.get()) != 0) {
    err = errno_text("sync", dir);
    return false;
  }
  return true;
}

}  // namespace

SegmentLog::SegmentLog(std::string dir, uint64_t segment_bytes)
    : dir_(std::move(dir)), segment_bytes_(segment_bytes ? segment_bytes : 1) {}

std::string SegmentLog::path_of(uint64_t seg) const {
  return fmt::format("{}/{:010}.seg", dir_, seg);
}

void SegmentLog::start_after(uint64_t last_seg) {
  if (::mkdir(dir_.c_str(), 0750) != 0 && errno != EEXIST)
    throw std::runtime_error(errno_text("mkdir", dir_));
  std::string err;
  if (!sync_dir(dir_ + "/..", err)) throw std::runtime_error(err);
  write_fds_.clear();
  staged_.clear();
  flushed_ = false;
  seg_ = tseg_ = last_seg + 1;
  end_ = tend_ = 0;
}

SegmentLog::Place SegmentLog::place(uint64_t len) const {
  if (tend_ > 0 && tend_ + len > segment_bytes_) return {tseg_ + 1, 0, true};
  return {tseg_, tend_, tend_ == 0};
}

void SegmentLog::stage(std::string_view blob) {
  const Place p = place(blob.size());
  tseg_ = p.seg;
  tend_ = p.off + blob.size();
  if (staged_.empty() || staged_.back().seg != p.seg) staged_.push_back({p.seg, p.off, {}});
  staged_.back().bytes.append(blob);
  flushed_ = false;
}

bool SegmentLog::flush(std::string& err) {
  if (staged_.empty() || flushed_) return true;
  for (const auto& s : staged_) {
    auto it = write_fds_.find(s.seg);
    if (it == write_fds_.end()) {
      const std::string path = path_of(s.seg);
      // Not O_TRUNC: a segment is only ever reopened to continue it, and a file left by a failed flush
      // holds nothing a committed row names.
      Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0640));
      if (fd.get() < 0) {
        err = errno_text("open", path);
        return false;
      }
      it = write_fds_.emplace(s.seg, Writer{std::move(fd), false}).first;
    }
    const char* p = s.bytes.data();
    std::size_t left = s.bytes.size();
    auto off = static_cast<off_t>(s.off);
    while (left > 0) {
      ssize_t n = ::pwrite(it->second.fd.get(), p, left, off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0) errno = EIO;
        err = errno_text("write", path_of(s.seg));
        return false;
      }
      p += n;
      left -= static_cast<std::size_t>(n);
      off += n;
    }
    if (::fdatasync(it->second.fd.get()) != 0) {
      err = errno_text("sync", path_of(s.seg));
      return false;
    }
  }
  // A file's name is durable once its directory is synced: done once per file, after its first write (and
  // again if that sync failed, since the flag is only set when it succeeds).
  bool new_names = false;
  for (const auto& [seg, w] : write_fds_) new_names = new_names || !w.name_synced;
  if (new_names) {
    if (!sync_dir(dir_, err)) return false;
    for (auto& [seg, w] : write_fds_) w.name_synced = true;
  }
  flushed_ = true;
  return true;
}

void SegmentLog::committed() {
  if (staged_.empty()) return;
  seg_ = tseg_;
  end_ = tend_;
  staged_.clear();
  flushed_ = false;
  // Segments before the current one are complete: no writer needs them open.
  for (auto it = write_fds_.begin(); it != write_fds_.end();)
    it = it->first < seg_ ? write_fds_.erase(it) : std::next(it);
}

void SegmentLog::rolled_back() {
  if (flushed_) {
    // The bytes were written and synced, then the COMMIT failed. SQLite may still have written that
    // transaction's frames (a failed WAL sync), and a crash before the next commit lets recovery replay
    // them: its rows would name these bytes. So they are never written over: writing continues in a new
    // segment (registered by its first row, like any other).
    seg_ = tseg_ + 1;
    end_ = 0;
  }
  staged_.clear();
  flushed_ = false;
  tseg_ = seg_;
  tend_ = end_;
}

bool SegmentLog::read(uint64_t seg, uint64_t off, uint64_t len, std::string& out, std::string& err) {
  auto it = read_fds_.find(seg);
  if (it == read_fds_.end()) {
    if (read_fds_.size() >= 16) read_fds_.clear();
    const std::string path = path_of(seg);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      err = errno == ENOENT
                ? fmt::format("segment {} is gone (retention deleted it, or it was not copied)", path)
                : errno_text("open", path);
      return false;
    }
    it = read_fds_.emplace(seg, Fd(fd)).first;
  }
  // Checked before allocating: a corrupt row's length must not become a huge allocation.
  struct stat st {};
  if (::fstat(it->second.get(), &st) != 0) {
    err = errno_text("stat", path_of(seg));
    return false;
  }
  if (off > static_cast<uint64_t>(st.st_size) || len > static_cast<uint64_t>(st.st_size) - off) {
    err =
        fmt::format("segment {} ends before byte {} (truncated, or a corrupt row)", path_of(seg), off + len);
    return false;
  }
  out.resize(len);
  std::size_t got = 0;
  while (got < len) {
    ssize_t n = ::pread(it->second.get(), out.data() + got, len - got, static_cast<off_t>(off + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno_text("read", path_of(seg));
      return false;
    }
    if (n == 0) {
      err = fmt::format("segment {} ends before byte {} (truncated)", path_of(seg), off + len);
      return false;
    }
    got += static_cast<std::size_t>(n);
  }
  return true;
}

std::vector<uint64_t> SegmentLog::files() const {
  std::vector<uint64_t> out;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir_.c_str()), &::closedir);
  if (!d) return out;
  while (const dirent* e = ::readdir(d.get())) {
    std::string_view name(e->d_name);
    if (name.size() != 14 || name.substr(10) != ".seg") continue;
    uint64_t v = 0;
    bool digits = true;
    for (char c : name.substr(0, 10)) {
      if (c < '0' || c > '9') digits = false;
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (digits) out.push_back(v);
  }
  return out;
}

}  // namespace netprism::store
