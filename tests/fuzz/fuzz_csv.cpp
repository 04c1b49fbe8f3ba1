// Flow CSV import (`netprism analyze --format csv`): any file a user points it at.
#include <cstdint>
#include <string>

#include "analysis.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace netprism;
  static const std::string path = fuzz::scratch_dir() + "/flows.csv";
  fuzz::write_file(path, data, size);
  std::string err;
  (void)analysis::load_csv(path, "", err);
  return 0;
}
