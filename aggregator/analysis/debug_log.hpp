// Debug output of the analysis stages, through a settable sink: the stages stay pure functions of their
// inputs (they read no environment and open no file), and a binary decides where their diagnostic lines and
// transfer dumps go (the CLI or the daemon can hand them to their own logger with set_sink()).
//
// Default: what the environment asked for when the binary started (read once, during static
// initialisation, never inside a stage): NP_ANALYSIS_DEBUG set -> lines to stderr; NP_ANALYSIS_DUMP=PREFIX ->
// each job's transfers to PREFIX.<first node>.csv. Neither set: both off, and the stages skip the work.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace netprism::analysis::debug {

struct Sink {
  // One diagnostic line, without its newline. Empty: lines are off.
  std::function<void(std::string_view line)> line;
  // One job's transfers as CSV; `name` is the job's first node. Empty: dumps are off.
  std::function<void(std::string_view name, std::string_view csv)> dump;
};

// Installs `sink` for every analysis that starts afterwards. The stages read the sink without a lock, so a
// binary sets it before it starts analysing (at start-up), not while an analysis runs on another thread.
void set_sink(Sink sink);
// The sink the environment asks for (see above); what the library starts with.
Sink sink_from_env();

bool lines_on();
void line(std::string_view text);
bool dumps_on();
void dump(std::string_view name, std::string_view csv);

// printf-style formatting appended to `out`: a stage builds a line, then hands it to line() whole.
void appendf(std::string& out, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace netprism::analysis::debug
