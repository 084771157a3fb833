// SPDX-License-Identifier: MIT
#pragma once
/// The command line each worker runs: `PYTHON -u [-m] prog args` or `prog args`, never a shell.
/// Building the argv is pure; resolving names on PATH and checking files touches the disk.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/config/launch_config.hpp"

namespace ddp::launcher {

/// The `python -c` program of --run_path: the script and its arguments follow it on the command
/// line (sys.argv[1:]); it runs the script as __main__ with sys.argv = [script, args...].
inline constexpr std::string_view kRunPathBootstrap =
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')";

/// argv for one worker, with the interpreter or program as given (not yet resolved on PATH).
std::vector<std::string> worker_argv(const LaunchConfig& config);

/// Resolves a program name the way execvp does: a name containing '/' is used as is, anything
/// else is searched in `path_env` (a PATH value). Errors (exit code 127) say "not found",
/// "is a directory" or "is not executable".
Result<std::string> resolve_executable(const std::string& name, const std::string& path_env);

/// The `python3` beside `executable` (ddprun's own path) when that directory is the bin/ of a
/// virtual environment (its parent holds pyvenv.cfg): the wheel installed ddprun there. The path
/// is kept as it is, not resolved: the venv's python3 is a link that the venv's activation
/// needs.
std::optional<std::string> venv_python_beside(const std::string& executable);

/// The executable to exec for this configuration (the interpreter for Python programs), resolved
/// and checked; for a Python script, also checks that the script is a readable regular file.
Result<std::string> resolve_worker_executable(const LaunchConfig& config,
                                              const std::string& path_env);

}  // namespace ddp::launcher
