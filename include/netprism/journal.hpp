// Syslog priority prefixes for lines written to stderr when stderr is the systemd journal: journald reads a
// leading "<N>" as the line's priority (sd-daemon(3)), so `journalctl -p warning` finds warnings. Detected by
// $JOURNAL_STREAM ("DEVICE:INODE" of the stream systemd connected), compared with what stderr is, so a
// redirected stderr (a test's log file, a pipe) never gets the prefix.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace netprism {

inline bool stderr_is_journal() {
  static const bool yes = [] {
    const char* env = std::getenv("JOURNAL_STREAM");
    unsigned long long dev = 0, ino = 0;
    struct stat st {};
    return env && std::sscanf(env, "%llu:%llu", &dev, &ino) == 2 && ::fstat(STDERR_FILENO, &st) == 0 &&
           static_cast<unsigned long long>(st.st_dev) == dev &&
           static_cast<unsigned long long>(st.st_ino) == ino;
  }();
  return yes;
}

// "<3>" error, "<4>" warning, "<6>" info on the journal; "" elsewhere.
inline const char* journal_prefix(int syslog_priority) {
  static const char* const kPrefix[] = {"<0>", "<1>", "<2>", "<3>", "<4>", "<5>", "<6>", "<7>"};
  return stderr_is_journal() && syslog_priority >= 0 && syslog_priority <= 7 ? kPrefix[syslog_priority] : "";
}

}  // namespace netprism
