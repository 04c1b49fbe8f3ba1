#include "zstd_blob.hpp"

#include <zstd.h>

#include <memory>

namespace netprism::store {
namespace {
struct CctxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxFree {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};
}  // namespace

bool zstd_compress_into(std::string_view in, int level, std::string& out) {
  // One context per thread: reusing it avoids re-allocating zstd's tables for every batch.
  thread_local std::unique_ptr<ZSTD_CCtx, CctxFree> ctx(ZSTD_createCCtx());
  std::size_t bound = ZSTD_compressBound(in.size());
  if (out.size() < bound) out.resize(bound);
  size_t n = ZSTD_compressCCtx(ctx.get(), out.data(), out.size(), in.data(), in.size(), level);
  if (ZSTD_isError(n)) return false;  // cannot happen with a bound-sized buffer
  out.resize(n);
  return true;
}

std::string zstd_compress(std::string_view in, int level) {
  std::string out;
  return zstd_compress_into(in, level, out) ? out : std::string();
}

std::optional<std::string> zstd_decompress(std::string_view in, std::size_t max_size, std::string& err) {
  thread_local std::unique_ptr<ZSTD_DCtx, DctxFree> ctx(ZSTD_createDCtx());
  unsigned long long size = ZSTD_getFrameContentSize(in.data(), in.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) {
    err = "stored batch is not a sized zstd frame";
    return std::nullopt;
  }
  if (size > max_size) {
    err = "stored batch declares " + std::to_string(size) + " bytes, above the limit";
    return std::nullopt;
  }
  std::string out(size, '\0');
  size_t n = ZSTD_decompressDCtx(ctx.get(), out.data(), out.size(), in.data(), in.size());
  if (ZSTD_isError(n) || n != size) {
    err = std::string("corrupt stored batch: ") + (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short frame");
    return std::nullopt;
  }
  return out;
}

}  // namespace netprism::store
