// SPDX-License-Identifier: MIT
#pragma once
/// How a process ended, and the exit code ddprun reports for it. Pure.

#include <string>

namespace ddp::launcher {

struct ExitStatus {
  enum class Kind { Exited, Signaled };
  Kind kind = Kind::Exited;
  int code = 0;    // exit code (Exited)
  int signal = 0;  // signal number (Signaled)
  bool core_dumped = false;

  static ExitStatus exited(int code) { return {Kind::Exited, code, 0, false}; }
  static ExitStatus signaled(int sig, bool core = false) { return {Kind::Signaled, 0, sig, core}; }
  bool success() const { return kind == Kind::Exited && code == 0; }
  bool operator==(const ExitStatus&) const = default;
};

/// Decodes a waitpid() status word.
ExitStatus exit_status_from_wait(int wait_status);

/// The shell convention: the exit code itself, or 128 + signal number.
int shell_exit_code(const ExitStatus& status);

/// "SIGSEGV" for 11; "SIG37" for a number without a name.
std::string signal_name(int signal);

/// "exit code 3", "signal SIGSEGV (11, core dumped)".
std::string describe(const ExitStatus& status);

}  // namespace ddp::launcher
