// Shared by the libFuzzer harnesses: a scratch directory per process for parsers that read files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace netprism::fuzz {

// A directory for this process (removed when the process exits normally), so parallel fuzzers never share
// files.
inline const std::string& scratch_dir() {
  struct Scratch {
    std::string dir =
        (std::filesystem::temp_directory_path() / ("np_fuzz_" + std::to_string(::getpid()))).string();
    Scratch() { std::filesystem::create_directories(dir); }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Scratch s;
  return s.dir;
}

inline void write_file(const std::string& path, const uint8_t* data, std::size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace netprism::fuzz
