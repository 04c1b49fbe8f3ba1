// Command-line conventions shared by the three binaries (contracts: exit codes).
#pragma once

#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "netprism/version.hpp"

namespace netprism::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// Adds --version (and keeps -h/--help) in the contract's form.
inline void standard_flags(CLI::App& app) {
  app.set_version_flag("--version", std::string(kVersion));
}

// Parses argv. Returns nullopt when the program should go on, else the exit code to return: 0 after --help or
// --version, 2 for every usage error the parser finds (unknown flag, missing or malformed argument), with one
// line on stderr.
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion&) {
    std::cout << app.get_name() << " " << kVersion << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << " (see --help)\n";
    return kExitUsage;
  }
  return std::nullopt;
}

// One-line error on stderr; returns the generic error exit code.
inline int fail(const std::string& prog, const std::string& msg) {
  std::cerr << prog << ": " << msg << "\n";
  return kExitError;
}

}  // namespace netprism::cli
