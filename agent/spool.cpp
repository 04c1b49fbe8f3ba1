#include "spool.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "log.hpp"

namespace netprism::agent {
namespace {

constexpr char kMagic[8] = {'N', 'P', 'S', 'P', 'O', 'O', 'L', '1'};
constexpr std::size_t kHeaderBytes = 32;  // magic(8) records(4) reserved(4) length(8) fnv1a64(8)

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void put_le(char* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t get_le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool read_all(int fd, char* p, std::size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool parse_name(const char* name, BatchKey& k) {
  unsigned long long e = 0, s = 0;
  char tail[8] = {};
  if (std::strlen(name) != 16 + 1 + 16 + 4) return false;
  if (std::sscanf(name, "%16llx-%16llx%4s", &e, &s, tail) != 3) return false;
  if (std::strcmp(tail, ".npb") != 0) return false;
  k = {e, s};
  return true;
}

}  // namespace

Spool::Spool(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}

Spool::~Spool() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::string Spool::path_of(BatchKey k) const {
  char name[64];
  std::snprintf(name, sizeof name, "/%016" PRIx64 "-%016" PRIx64 ".npb", k.epoch, k.seq);
  return dir_ + name;
}

bool Spool::open(std::string& err) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    err = "cannot create spool directory " + dir_ + ": " + ec.message();
    return false;
  }
  dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) {
    err = "cannot open spool directory " + dir_ + ": " + std::strerror(errno);
    return false;
  }
  if (::access(dir_.c_str(), W_OK) != 0) {
    err = "spool directory " + dir_ + " is not writable: " + std::strerror(errno);
    return false;
  }
  DIR* d = ::opendir(dir_.c_str());
  if (!d) {
    err = "cannot list spool directory " + dir_ + ": " + std::strerror(errno);
    return false;
  }
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind(".tmp-", 0) == 0) {
      stale.push_back(name);  // a write interrupted by a crash: never renamed, so never acknowledged data
      continue;
    }
    BatchKey k;
    if (!parse_name(e->d_name, k)) continue;  // not ours; leave it alone
    std::string path = dir_ + "/" + name;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    char hdr[kHeaderBytes];
    struct stat st {};
    bool ok = fd >= 0 && ::fstat(fd, &st) == 0 && read_all(fd, hdr, kHeaderBytes) &&
              std::memcmp(hdr, kMagic, 8) == 0 &&
              get_le(hdr + 16, 8) + kHeaderBytes == static_cast<uint64_t>(st.st_size);
    if (fd >= 0) ::close(fd);
    if (!ok) {
      ++stats_.corrupt_files;
      log_warn("spool: removing unreadable file " + path + " (truncated or not a spool file)");
      ::unlink(path.c_str());
      continue;
    }
    Entry en{static_cast<uint64_t>(st.st_size), static_cast<uint32_t>(get_le(hdr + 8, 4))};
    index_[k] = en;
    bytes_ += en.file_bytes;
    records_ += en.records;
  }
  ::closedir(d);
  for (const auto& n : stale) ::unlink((dir_ + "/" + n).c_str());
  // A smaller bound than the previous run's: honour it now, oldest first, counted like any other drop.
  while (bytes_ > max_bytes_ && !index_.empty()) drop(index_.begin()->first, "spool above its size bound");
  if (!index_.empty())
    log_info("spool: " + std::to_string(index_.size()) + " unacknowledged batches (" +
             std::to_string(records_) + " records) from an earlier run in " + dir_ + " will be resent");
  return true;
}

void Spool::drop(BatchKey k, const char* why) {
  auto it = index_.find(k);
  if (it == index_.end()) return;
  ++stats_.dropped_batches;
  stats_.dropped_records += it->second.records;
  log_warn(std::string("spool: dropped oldest batch epoch=") + std::to_string(k.epoch) +
           " seq=" + std::to_string(k.seq) + " (" + std::to_string(it->second.records) + " records): " + why +
           "; total dropped " + std::to_string(stats_.dropped_batches) + " batches");
  erase(k);
}

bool Spool::push(BatchKey key, const std::string& payload, uint32_t records) {
  if (index_.count(key)) return true;
  uint64_t need = kHeaderBytes + payload.size();
  if (need > max_bytes_) {
    ++stats_.dropped_batches;
    stats_.dropped_records += records;
    log_warn("spool: batch seq=" + std::to_string(key.seq) + " (" + std::to_string(need) +
             " bytes) is larger than the whole spool bound; dropped");
    return false;
  }
  while (bytes_ + need > max_bytes_ && !index_.empty()) drop(index_.begin()->first, "spool full");

  char hdr[kHeaderBytes] = {};
  std::memcpy(hdr, kMagic, 8);
  put_le(hdr + 8, records, 4);
  put_le(hdr + 16, payload.size(), 8);
  put_le(hdr + 24, fnv1a64(payload), 8);
  std::string final_path = path_of(key);
  std::string tmp = dir_ + "/.tmp-" + final_path.substr(dir_.size() + 1);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && write_all(fd, hdr, kHeaderBytes) && write_all(fd, payload.data(), payload.size()) &&
            ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  ok = ok && ::rename(tmp.c_str(), final_path.c_str()) == 0;
  if (!ok) {
    int e = errno;
    ::unlink(tmp.c_str());
    ++stats_.write_errors;
    log_error("spool: cannot write " + final_path + ": " + std::strerror(e));
    return false;
  }
  if (dir_fd_ >= 0) ::fsync(dir_fd_);  // make the rename itself durable
  index_[key] = {need, records};
  bytes_ += need;
  records_ += records;
  return true;
}

std::optional<std::string> Spool::load(BatchKey key) {
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  std::string path = path_of(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  char hdr[kHeaderBytes];
  std::string payload;
  bool ok = fd >= 0 && read_all(fd, hdr, kHeaderBytes) && std::memcmp(hdr, kMagic, 8) == 0;
  if (ok) {
    uint64_t len = get_le(hdr + 16, 8);
    ok = len + kHeaderBytes == it->second.file_bytes;
    if (ok) {
      payload.resize(len);
      ok = read_all(fd, payload.data(), len) && fnv1a64(payload) == get_le(hdr + 24, 8);
    }
  }
  if (fd >= 0) ::close(fd);
  if (!ok) {
    ++stats_.corrupt_files;
    stats_.dropped_records += it->second.records;
    log_error("spool: " + path + " is corrupt (checksum or length mismatch); its " +
              std::to_string(it->second.records) + " records are lost and counted");
    erase(key);
    return std::nullopt;
  }
  return payload;
}

void Spool::erase(BatchKey key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  ::unlink(path_of(key).c_str());
  bytes_ -= it->second.file_bytes;
  records_ -= it->second.records;
  index_.erase(it);
}

std::optional<BatchKey> Spool::oldest() const {
  if (index_.empty()) return std::nullopt;
  return index_.begin()->first;
}

}  // namespace netprism::agent
