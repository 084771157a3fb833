// SPDX-License-Identifier: MIT
#pragma once
/// Every exit code ddprun, ddprun-store and ddprun-store-proxy choose themselves, named once. A
/// worker failure passes the worker's own code through (or 128 + signal). The user-facing table is
/// README.md#exit-codes (keep the two in step; `ddprun report`'s codes are in docs/health.md).
/// Here, below launcher/ and rendezvous/, so that both include it without an upward arrow.
/// Where a code is sysexits.h's, its EX_ name is given: scripts can tell the causes apart.

namespace ddp::exit_codes {

/// Every worker exited 0 (or help, version, a dry run).
inline constexpr int kSuccess = 0;
/// A failure with no more specific code: ddprun-store's or ddprun-store-proxy's own (the store's
/// port taken, a proxy that cannot run); `ddprun --store-only` turns the store's into kUnavailable.
inline constexpr int kFailure = 1;
/// Bad command line or configuration (CLI11's own convention is 106+; we keep the shell's 2).
inline constexpr int kUsage = 2;
/// `ddprun report`: a line that is not an event ddprun wrote: EX_DATAERR.
inline constexpr int kDataError = 65;
/// `ddprun report`: no such file, or it cannot be read: EX_NOINPUT.
inline constexpr int kNoInput = 66;
/// A service could not be set up or reached: the store (port in use) or the rendezvous (join
/// timeout, refused join, unreachable store), the status endpoint's port, a `ddprun top` with no
/// job answering, a root store that refuses the proxy's tagged mode: EX_UNAVAILABLE.
inline constexpr int kUnavailable = 69;
/// ddprun failed internally (fork, pipe, epoll, a cgroup...): EX_SOFTWARE. The zygote's Python
/// script (launcher/process/zygote_script.cpp) writes the same 70 as a literal.
inline constexpr int kInternal = 70;
/// Every worker succeeded, but a log or events file could not be written (ENOSPC, EIO...), or
/// `ddprun report`'s output cannot be written: EX_CANTCREAT. A worker's failure keeps its code.
inline constexpr int kCannotWrite = 73;
/// A node (or the store's host) vanished while the job ran: EX_IOERR.
inline constexpr int kNodeLost = 74;
/// The job was judged hung (--hang-timeout): EX_TEMPFAIL, "a restart may help".
inline constexpr int kHung = 75;
/// A helper child (the stack dumper) could not set up its standard streams before exec: the
/// shell's "found but cannot be invoked".
inline constexpr int kCannotInvoke = 126;
/// The program (or the Python interpreter) cannot be found or executed, as in the shell.
inline constexpr int kNotExecutable = 127;
/// ddprun itself was stopped by signal N: 128 + N (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 131
/// SIGQUIT); a worker killed by signal N is reported the same way.
inline constexpr int kSignalBase = 128;

}  // namespace ddp::exit_codes
