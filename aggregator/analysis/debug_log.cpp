#include "debug_log.hpp"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace netprism::analysis::debug {
namespace {

Sink& current() {
  static Sink sink = sink_from_env();
  return sink;
}

// The environment is read when the binary starts (static initialisation), not by the first stage that logs.
[[maybe_unused]] const bool kReadAtStart = (current(), true);

}  // namespace

Sink sink_from_env() {
  Sink sink;
  if (std::getenv("NP_ANALYSIS_DEBUG"))
    sink.line = [](std::string_view text) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(text.size()), text.data());
    };
  if (const char* prefix = std::getenv("NP_ANALYSIS_DUMP"))
    sink.dump = [prefix = std::string(prefix)](std::string_view name, std::string_view csv) {
      std::string path = prefix + "." + std::string(name) + ".csv";
      FILE* f = std::fopen(path.c_str(), "w");
      if (!f) {
        std::fprintf(stderr, "NP_ANALYSIS_DUMP: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
        return;
      }
      std::fwrite(csv.data(), 1, csv.size(), f);
      std::fclose(f);
    };
  return sink;
}

void set_sink(Sink sink) {
  current() = std::move(sink);
}

bool lines_on() {
  return static_cast<bool>(current().line);
}

void line(std::string_view text) {
  if (lines_on()) current().line(text);
}

bool dumps_on() {
  return static_cast<bool>(current().dump);
}

void dump(std::string_view name, std::string_view csv) {
  if (dumps_on()) current().dump(name, csv);
}

void appendf(std::string& out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  int len = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (len > 0) {
    size_t at = out.size();
    out.resize(at + static_cast<size_t>(len) + 1);
    std::vsnprintf(out.data() + at, static_cast<size_t>(len) + 1, format, again);
    out.resize(at + static_cast<size_t>(len));
  }
  va_end(again);
}

}  // namespace netprism::analysis::debug
