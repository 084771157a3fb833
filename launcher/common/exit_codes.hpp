// SPDX-License-Identifier: MIT
#pragma once
/// ddprun's own exit codes. A worker failure passes the worker's code through (or 128+signal);
/// these are the codes ddprun uses for everything else. Documented in docs/launcher.md.

namespace ddp::launcher::exit_codes {

inline constexpr int kSuccess = 0;
/// Bad command line or configuration (CLI11's own convention is 106+; we keep the shell's 2).
inline constexpr int kUsage = 2;
/// ddprun failed internally (fork, pipe, epoll...): sysexits' EX_SOFTWARE.
inline constexpr int kInternal = 70;
/// Every worker succeeded, but a log or events file could not be written (ENOSPC, EIO...):
/// sysexits' EX_CANTCREAT. Any worker failure or signal keeps its own code.
inline constexpr int kLogWriteFailed = 73;
/// The job was judged hung (--hang-timeout): sysexits' EX_TEMPFAIL, "a restart may help".
inline constexpr int kHung = 75;
/// The program (or the Python interpreter) cannot be found or executed, as in the shell.
inline constexpr int kNotExecutable = 127;
/// ddprun itself was stopped by signal N: 128 + N (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 131
/// SIGQUIT).
inline constexpr int kSignalBase = 128;

}  // namespace ddp::launcher::exit_codes
