// The store's column-encoded batch codec (batch_codec.hpp): stored bytes are read back from disk and from
// `netprism record` files, which may be damaged or crafted. Both the raw column decoder and the zstd path.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "batch_codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace netprism;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string err;
  if (auto b = store::decode_stored(in, err)) {
    std::string again;
    store::encode_stored(*b, again);  // what decoded must encode, and decode again
    if (!store::decode_stored(again, err)) std::abort();
  }
  (void)store::decompress_stored(in, err);
  return 0;
}
