#include "write_coalescing_vfs.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace netprism::store {

namespace {

constexpr const char* kName = "np-coalesce";
// The pending run's bound. The unix VFS writes at most 0x1ffff bytes per call (seekAndWriteFd() masks the
// length with it), so a run stays below 128 KiB: 30 WAL frames or 31 pages per write call instead of 60 and
// 31 calls. Allocated on a file's first write, freed when it closes.
constexpr std::size_t kBufferBytes = 124u << 10;

sqlite3_vfs* g_real = nullptr;  // the default VFS this one wraps
sqlite3_vfs g_vfs;
// The same methods, declared as version 1, 2 and 3: a file gets the table of its real file's version, so
// SQLite never calls through us a method the real file lacks (the unix VFS's files are all version 3).
sqlite3_io_methods g_methods[3];

struct File {
  sqlite3_file base;   // first: SQLite sees this struct as a sqlite3_file
  sqlite3_file* real;  // the real file, placed after this struct in the same allocation
  bool coalesce;       // main database and WAL only (journals, temp files: written through)
  char* buf;
  std::size_t len;
  sqlite3_int64 off;  // file offset of buf[0]
};
constexpr int kRealOffset = static_cast<int>((sizeof(File) + 7) & ~std::size_t{7});

File* file(sqlite3_file* p) {
  return reinterpret_cast<File*>(p);
}
const sqlite3_io_methods* real_methods(File* f) {
  return f->real->pMethods;
}

int flush(File* f) {
  if (f->len == 0) return SQLITE_OK;
  const int rc = real_methods(f)->xWrite(f->real, f->buf, static_cast<int>(f->len), f->off);
  f->len = 0;
  return rc;
}

// ---- io methods (which flush the pending run first: see flushed() below) ----

int x_close(sqlite3_file* p) {
  File* f = file(p);
  const int rc = flush(f);
  const int rc2 = real_methods(f)->xClose(f->real);
  std::free(f->buf);
  f->buf = nullptr;
  return rc != SQLITE_OK ? rc : rc2;
}

int x_write(sqlite3_file* p, const void* data, int amt, sqlite3_int64 off) {
  File* f = file(p);
  if (!f->coalesce || amt <= 0) return real_methods(f)->xWrite(f->real, data, amt, off);
  const auto n = static_cast<std::size_t>(amt);
  if (f->len > 0) {
    // Inside the pending run or extending it (SQLite appends frames, and may rewrite a frame of the same
    // transaction in place): into the buffer.
    const sqlite3_int64 end = f->off + static_cast<sqlite3_int64>(f->len);
    if (off >= f->off && off <= end &&
        off + static_cast<sqlite3_int64>(n) <= f->off + static_cast<sqlite3_int64>(kBufferBytes)) {
      const auto at = static_cast<std::size_t>(off - f->off);
      std::memcpy(f->buf + at, data, n);
      f->len = std::max(f->len, at + n);
      return SQLITE_OK;
    }
    if (int rc = flush(f); rc != SQLITE_OK) return rc;
  }
  if (n > kBufferBytes) return real_methods(f)->xWrite(f->real, data, amt, off);
  if (!f->buf && !(f->buf = static_cast<char*>(std::malloc(kBufferBytes))))
    return real_methods(f)->xWrite(f->real, data, amt, off);  // no memory for a buffer: write through
  std::memcpy(f->buf, data, n);
  f->len = n;
  f->off = off;
  return SQLITE_OK;
}

// Every method but xWrite and the pure queries (xSectorSize, xDeviceCharacteristics) flushes the
// pending run first, then forwards to the real file: among others xSync (what a commit makes durable),
// xLock/xShm* (what other connections may see), xFileControl (SQLITE_FCNTL_CKPT_DONE, which a checkpoint
// sends after copying pages into the database file and before it records them as copied).
template <auto Method, class... Args>
int flushed(sqlite3_file* p, Args... args) {
  File* f = file(p);
  if (int rc = flush(f); rc != SQLITE_OK) return rc;
  return (real_methods(f)->*Method)(f->real, args...);
}

int x_sector_size(sqlite3_file* p) {
  File* f = file(p);
  return real_methods(f)->xSectorSize(f->real);
}

int x_device_characteristics(sqlite3_file* p) {
  File* f = file(p);
  return real_methods(f)->xDeviceCharacteristics(f->real);
}

void x_shm_barrier(sqlite3_file* p) {
  File* f = file(p);
  (void)flush(f);  // no way to report an error here; a failed write fails again at the next sync
  real_methods(f)->xShmBarrier(f->real);
}

// ---- the VFS: xOpen wraps the real file; everything else is the real VFS's ----

int x_open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* p, int flags, int* out_flags) {
  File* f = file(p);
  f->base.pMethods = nullptr;
  f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(p) + kRealOffset);
  f->coalesce = (flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL)) != 0;
  f->buf = nullptr;
  f->len = 0;
  f->off = 0;
  const int rc = g_real->xOpen(g_real, name, f->real, flags, out_flags);
  // SQLite calls xClose whenever pMethods is set, even after a failed open: mirror the real file.
  if (f->real->pMethods) p->pMethods = &g_methods[std::clamp(f->real->pMethods->iVersion, 1, 3) - 1];
  return rc;
}

int x_delete(sqlite3_vfs*, const char* name, int sync_dir) {
  return g_real->xDelete(g_real, name, sync_dir);
}
int x_access(sqlite3_vfs*, const char* name, int flags, int* out) {
  return g_real->xAccess(g_real, name, flags, out);
}
int x_full_pathname(sqlite3_vfs*, const char* name, int n, char* out) {
  return g_real->xFullPathname(g_real, name, n, out);
}
void* x_dl_open(sqlite3_vfs*, const char* name) {
  return g_real->xDlOpen(g_real, name);
}
void x_dl_error(sqlite3_vfs*, int n, char* out) {
  g_real->xDlError(g_real, n, out);
}
void (*x_dl_sym(sqlite3_vfs*, void* h, const char* sym))(void) {
  return g_real->xDlSym(g_real, h, sym);
}
void x_dl_close(sqlite3_vfs*, void* h) {
  g_real->xDlClose(g_real, h);
}
int x_randomness(sqlite3_vfs*, int n, char* out) {
  return g_real->xRandomness(g_real, n, out);
}
int x_sleep(sqlite3_vfs*, int us) {
  return g_real->xSleep(g_real, us);
}
int x_current_time(sqlite3_vfs*, double* out) {
  return g_real->xCurrentTime(g_real, out);
}
int x_get_last_error(sqlite3_vfs*, int n, char* out) {
  return g_real->xGetLastError ? g_real->xGetLastError(g_real, n, out) : 0;
}
int x_current_time_int64(sqlite3_vfs*, sqlite3_int64* out) {
  return g_real->xCurrentTimeInt64(g_real, out);
}
int x_set_system_call(sqlite3_vfs*, const char* name, sqlite3_syscall_ptr fn) {
  return g_real->xSetSystemCall(g_real, name, fn);
}
sqlite3_syscall_ptr x_get_system_call(sqlite3_vfs*, const char* name) {
  return g_real->xGetSystemCall(g_real, name);
}
const char* x_next_system_call(sqlite3_vfs*, const char* name) {
  return g_real->xNextSystemCall(g_real, name);
}

const char* register_vfs() {
  g_real = sqlite3_vfs_find(nullptr);
  // The unix VFS: version 3, with xCurrentTimeInt64 and the system-call hooks, which this wrapper forwards.
  if (!g_real || g_real->iVersion < 3)
    throw std::runtime_error("SQLite's default VFS is older than version 3");
  sqlite3_io_methods m{};
  m.xClose = x_close;
  m.xRead = flushed<&sqlite3_io_methods::xRead, void*, int, sqlite3_int64>;
  m.xWrite = x_write;
  m.xTruncate = flushed<&sqlite3_io_methods::xTruncate, sqlite3_int64>;
  m.xSync = flushed<&sqlite3_io_methods::xSync, int>;
  m.xFileSize = flushed<&sqlite3_io_methods::xFileSize, sqlite3_int64*>;
  m.xLock = flushed<&sqlite3_io_methods::xLock, int>;
  m.xUnlock = flushed<&sqlite3_io_methods::xUnlock, int>;
  m.xCheckReservedLock = flushed<&sqlite3_io_methods::xCheckReservedLock, int*>;
  m.xFileControl = flushed<&sqlite3_io_methods::xFileControl, int, void*>;
  m.xSectorSize = x_sector_size;
  m.xDeviceCharacteristics = x_device_characteristics;
  m.xShmMap = flushed<&sqlite3_io_methods::xShmMap, int, int, int, void volatile**>;
  m.xShmLock = flushed<&sqlite3_io_methods::xShmLock, int, int, int>;
  m.xShmBarrier = x_shm_barrier;
  m.xShmUnmap = flushed<&sqlite3_io_methods::xShmUnmap, int>;
  m.xFetch = flushed<&sqlite3_io_methods::xFetch, sqlite3_int64, int, void**>;
  m.xUnfetch = flushed<&sqlite3_io_methods::xUnfetch, sqlite3_int64, void*>;
  for (int v = 1; v <= 3; ++v) {
    g_methods[v - 1] = m;
    g_methods[v - 1].iVersion = v;
  }

  g_vfs = sqlite3_vfs{};
  g_vfs.iVersion = 3;
  g_vfs.szOsFile = kRealOffset + g_real->szOsFile;
  g_vfs.mxPathname = g_real->mxPathname;
  g_vfs.zName = kName;
  g_vfs.xOpen = x_open;
  g_vfs.xDelete = x_delete;
  g_vfs.xAccess = x_access;
  g_vfs.xFullPathname = x_full_pathname;
  g_vfs.xDlOpen = x_dl_open;
  g_vfs.xDlError = x_dl_error;
  g_vfs.xDlSym = x_dl_sym;
  g_vfs.xDlClose = x_dl_close;
  g_vfs.xRandomness = x_randomness;
  g_vfs.xSleep = x_sleep;
  g_vfs.xCurrentTime = x_current_time;
  g_vfs.xGetLastError = x_get_last_error;
  g_vfs.xCurrentTimeInt64 = x_current_time_int64;
  g_vfs.xSetSystemCall = x_set_system_call;
  g_vfs.xGetSystemCall = x_get_system_call;
  g_vfs.xNextSystemCall = x_next_system_call;
  if (sqlite3_vfs_register(&g_vfs, 0) != SQLITE_OK) throw std::runtime_error("cannot register an SQLite VFS");
  return kName;
}

}  // namespace

const char* write_coalescing_vfs() {
  static const char* name = register_vfs();
  return name;
}

}  // namespace netprism::store
