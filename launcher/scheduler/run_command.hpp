#pragma once
/// Runs a short helper command (scontrol) with a deadline: the one place in ddp_scheduler that
/// spawns a process. Never hangs: on timeout the child is killed with SIGKILL and reaped.

#include <chrono>
#include <string>
#include <vector>

namespace ddp::launcher::scheduler {

struct CommandResult {
  int exit_code = -1;      ///< exit status, 128+signal when killed, -1 when it could not start
  bool timed_out = false;  ///< true when the deadline killed it
  std::string output;      ///< stdout and stderr together, at most kMaxCommandOutput bytes
  std::string error;       ///< why it could not start (empty otherwise)
};

inline constexpr std::size_t kMaxCommandOutput = 1 << 20;

/// Runs argv (argv[0] looked up in PATH) with stdin from /dev/null, inheriting the environment,
/// in its own process group (killed as a whole on timeout).
CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

}  // namespace ddp::launcher::scheduler
