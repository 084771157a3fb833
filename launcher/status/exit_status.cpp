// SPDX-License-Identifier: MIT
#include "launcher/status/exit_status.hpp"

#include <fmt/format.h>
#include <sys/wait.h>

#include <csignal>

#include "common/exit_codes.hpp"

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

namespace {

// The names glibc's sigabbrev_np gives (2.32+); a table of our own so that the portable build,
// which may use glibc 2.28 only, names signals the same way (docs/packaging.md).
const char* signal_abbrev(int signal) {
  switch (signal) {
    case SIGHUP:
      return "HUP";
    case SIGINT:
      return "INT";
    case SIGQUIT:
      return "QUIT";
    case SIGILL:
      return "ILL";
    case SIGTRAP:
      return "TRAP";
    case SIGABRT:
      return "ABRT";
    case SIGBUS:
      return "BUS";
    case SIGFPE:
      return "FPE";
    case SIGKILL:
      return "KILL";
    case SIGUSR1:
      return "USR1";
    case SIGSEGV:
      return "SEGV";
    case SIGUSR2:
      return "USR2";
    case SIGPIPE:
      return "PIPE";
    case SIGALRM:
      return "ALRM";
    case SIGTERM:
      return "TERM";
#ifdef SIGSTKFLT
    case SIGSTKFLT:
      return "STKFLT";
#endif
    case SIGCHLD:
      return "CHLD";
    case SIGCONT:
      return "CONT";
    case SIGSTOP:
      return "STOP";
    case SIGTSTP:
      return "TSTP";
    case SIGTTIN:
      return "TTIN";
    case SIGTTOU:
      return "TTOU";
    case SIGURG:
      return "URG";
    case SIGXCPU:
      return "XCPU";
    case SIGXFSZ:
      return "XFSZ";
    case SIGVTALRM:
      return "VTALRM";
    case SIGPROF:
      return "PROF";
    case SIGWINCH:
      return "WINCH";
    case SIGPOLL:
      return "POLL";
    case SIGPWR:
      return "PWR";
    case SIGSYS:
      return "SYS";
    default:
      return nullptr;
  }
}

}  // namespace

std::string signal_name(int signal) {
  const char* abbrev = signal_abbrev(signal);
  if (abbrev) return std::string("SIG") + abbrev;
  return fmt::format("SIG{}", signal);
}

std::string describe(const ExitStatus& status) {
  if (status.kind == ExitStatus::Kind::Exited) return fmt::format("exit code {}", status.code);
  return fmt::format("signal {} ({}{})", signal_name(status.signal), status.signal,
                     status.core_dumped ? ", core dumped" : "");
}

}  // namespace ddp::launcher
