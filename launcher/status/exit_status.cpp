// SPDX-License-Identifier: MIT
#include "launcher/status/exit_status.hpp"

#include <fmt/format.h>
#include <string.h>  // sigabbrev_np
#include <sys/wait.h>

#include "launcher/common/exit_codes.hpp"

namespace ddp::launcher {

ExitStatus exit_status_from_wait(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    return ExitStatus::signaled(WTERMSIG(wait_status), WCOREDUMP(wait_status) != 0);
  }
  return ExitStatus::exited(WEXITSTATUS(wait_status));
}

int shell_exit_code(const ExitStatus& status) {
  if (status.kind == ExitStatus::Kind::Signaled) return exit_codes::kSignalBase + status.signal;
  return status.code;
}

std::string signal_name(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  if (abbrev) return std::string("SIG") + abbrev;
  return fmt::format("SIG{}", signal);
}

std::string describe(const ExitStatus& status) {
  if (status.kind == ExitStatus::Kind::Exited) return fmt::format("exit code {}", status.code);
  return fmt::format("signal {} ({}{})", signal_name(status.signal), status.signal,
                     status.core_dumped ? ", core dumped" : "");
}

}  // namespace ddp::launcher
