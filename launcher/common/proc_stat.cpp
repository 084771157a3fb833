// SPDX-License-Identifier: MIT
#include "launcher/common/proc_stat.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ddp::launcher {

bool parse_proc_stat(const char* text, ProcStat& out) {
  // "pid (comm) S ppid pgrp session ..."; comm may contain ") ", so take the last ')'.
  const char* close = std::strrchr(text, ')');
  if (!close) return false;
  int ppid = 0, pgrp = 0, session = 0;
  char state = '?';
  unsigned long long start_time = 0;
  // Fields 3-6, then 7-21 skipped as words (whatever their width), then 22 (starttime).
  const int got =
      std::sscanf(close + 1,
                  " %c %d %d %d %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                  "%*s %llu",
                  &state, &ppid, &pgrp, &session, &start_time);
  if (got < 4) return false;
  out.pid = static_cast<pid_t>(std::strtol(text, nullptr, 10));
  out.state = state;
  out.ppid = ppid;
  out.pgrp = pgrp;
  out.session = session;
  out.start_time = got == 5 ? std::optional<unsigned long long>(start_time) : std::nullopt;
  return true;
}

bool read_proc_stat(pid_t pid, ProcStat& out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return parse_proc_stat(buf, out);
}

}  // namespace ddp::launcher
