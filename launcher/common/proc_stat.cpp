// SPDX-License-Identifier: MIT
#include "launcher/common/proc_stat.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace ddp::launcher {

bool parse_proc_stat(const char* text, ProcStat& out) {
  // "pid (comm) S ppid pgrp session ..."; comm may contain ") ", so take the last ')'.
  const char* close = std::strrchr(text, ')');
  if (!close) return false;
  // The fields after comm, as words: field N (1-based, as proc(5) numbers them) is word N - 3.
  constexpr int kWords = 22;  // up to field 24 (rss)
  std::string_view words[kWords];
  int count = 0;
  for (const char* p = close + 1; *p && count < kWords;) {
    while (*p == ' ' || *p == '\n') ++p;
    const char* begin = p;
    while (*p && *p != ' ' && *p != '\n') ++p;
    if (p > begin) words[count++] = std::string_view(begin, static_cast<size_t>(p - begin));
  }
  if (count < 4 || words[0].size() != 1) return false;
  auto number = [&](int field, auto& value) {
    const int i = field - 3;
    if (i >= count) return false;
    auto [end, ec] = std::from_chars(words[i].data(), words[i].data() + words[i].size(), value);
    return ec == std::errc{} && end == words[i].data() + words[i].size();
  };
  int ppid = 0, pgrp = 0, session = 0;
  if (!number(4, ppid) || !number(5, pgrp) || !number(6, session)) return false;
  out.pid = static_cast<pid_t>(std::strtol(text, nullptr, 10));
  out.state = words[0][0];
  out.ppid = ppid;
  out.pgrp = pgrp;
  out.session = session;
  unsigned long long start_time = 0, utime = 0, stime = 0;
  long long rss = 0;
  out.start_time = number(22, start_time) ? std::optional(start_time) : std::nullopt;
  out.cpu_ticks =
      number(14, utime) && number(15, stime) ? std::optional(utime + stime) : std::nullopt;
  out.rss_pages = number(24, rss) && rss >= 0 ? std::optional(rss) : std::nullopt;
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
