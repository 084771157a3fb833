// SPDX-License-Identifier: MIT
#include "ddprun/worker/process_liveness.hpp"

#include "common/host_name.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

namespace ddp::worker {

bool process_is_dead(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A killed child stays a zombie until its parent reaps it; it will never act again.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

std::string this_host_name() { return ddp::host_name(); }

std::string pid_scope() {
  char link[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  // "pid:[4026531836]" -> the digits; without /proc the host alone has to do.
  std::string ns;
  for (ssize_t i = 0; i < n; ++i) {
    if (link[i] >= '0' && link[i] <= '9') ns += link[i];
  }
  return this_host_name() + "/" + (ns.empty() ? "0" : ns);
}

}  // namespace ddp::worker
