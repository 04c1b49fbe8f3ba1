// The agent's spool reader: files an earlier run (or a crash mid-write, or a full disk) left behind. The
// input is one spool file; open() indexes it, load() verifies and reads it.
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz_util.hpp"
#include "spool.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace netprism;
  static const std::string dir = fuzz::scratch_dir() + "/spool";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  fuzz::write_file(dir + "/0000000000000001-0000000000000002.npb", data, size);
  agent::Spool spool(dir, 1 << 20);
  std::string err;
  if (!spool.open(err)) return 0;
  for (auto it = spool.index().begin(); it != spool.index().end();) {
    auto key = (it++)->first;  // load() may drop a corrupt entry
    (void)spool.load(key);
  }
  return 0;
}
