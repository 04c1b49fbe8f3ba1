// zstd compression of stored raw batches. Decompression is bounded: a stored frame must declare its size and
// that size must be below the wire codec's message limit, so a corrupted row cannot make us allocate wildly.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace netprism::store {

std::string zstd_compress(std::string_view in, int level);
// Same, into a caller-owned buffer that is reused across calls (no allocation/page faults per batch).
// false on failure.
bool zstd_compress_into(std::string_view in, int level, std::string& out);
// nullopt (and a reason) on a corrupt or oversized frame.
std::optional<std::string> zstd_decompress(std::string_view in, std::size_t max_size, std::string& err);

}  // namespace netprism::store
