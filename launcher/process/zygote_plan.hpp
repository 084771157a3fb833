// SPDX-License-Identifier: MIT
#pragma once
/// --preload's pure decisions: which worker command lines a preloaded interpreter (the zygote,
/// zygote.hpp) can serve, the zygote's own command line, and what it answers.

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/env/worker_env.hpp"

namespace ddp::launcher {

/// `PYTHON [flags] script args`, `PYTHON [flags] -m module args` or `PYTHON [flags] -c code args`.
struct PythonInvocation {
  std::vector<std::string> interpreter;  // PYTHON and its flags (ddprun's workers: -u)
  std::string mode;                      // "script", "module" or "code"
  std::string target;                    // the script, the module or the code
  std::vector<std::string> args;         // what follows it (sys.argv[1:])
};

/// Splits a worker's argv; nullopt when it is not a Python command line of those forms (flags
/// taking a value, such as -W or -X, are not ddprun's and make it nullopt too).
std::optional<PythonInvocation> parse_python_invocation(const std::vector<std::string>& argv);

/// The zygote's argv: the workers' interpreter and flags, the bootstrap, its socket's descriptor,
/// the workers' program (to set sys.path[0] as theirs before importing) and the modules.
std::vector<std::string> zygote_argv(const PythonInvocation& workers, int socket_fd,
                                     const std::vector<std::string>& modules);

/// A zygote started for `zygote` can fork a worker that would exec `worker`: same interpreter,
/// same flags (they are fixed when an interpreter starts).
bool zygote_can_serve(const PythonInvocation& zygote, const PythonInvocation& worker);

/// True when every string is valid UTF-8. The request to the zygote is JSON, which carries text:
/// a worker whose argv or environment holds other bytes is exec'd, which passes them unchanged.
bool all_utf8(const std::vector<std::string>& strings);

/// The zygote's environment: the variables every local rank gets with the same value (ddprun's
/// OMP_NUM_THREADS=1 included), so that a module reading the environment at import (OpenBLAS
/// sizing its thread pool) sees what the workers would; per-rank ones are set after the fork.
EnvMap common_environment(const std::vector<EnvMap>& per_rank);

/// How start() starts one worker under --preload.
enum class WorkerStart {
  Exec,             // the usual fork/exec: no zygote, or it cannot serve this command line
  Fork,             // from the live zygote
  RespawnThenFork,  // the zygote died: start another one first
};
WorkerStart choose_worker_start(bool preload_enabled, bool zygote_alive, bool can_serve);

/// What the zygote says once it has imported the modules: ready (with the seconds it took) or
/// the one-line reason it cannot be used.
struct ZygoteReady {
  double import_seconds = 0;
};
std::variant<ZygoteReady, std::string> parse_zygote_hello(const std::string& message);

/// Its answer to a worker request: the worker's pid, or why there is none.
std::variant<int, std::string> parse_zygote_reply(const std::string& message);

}  // namespace ddp::launcher
