// SPDX-License-Identifier: MIT
#include "launcher/config/program.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/exit_codes.hpp"

namespace ddp::launcher {
namespace {

Error not_executable(std::string message) {
  return Error{exit_codes::kNotExecutable, std::move(message)};
}

/// Checks one candidate path; returns an empty string when it is a runnable file.
std::string why_not_runnable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "is a directory";
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (::access(path.c_str(), X_OK) != 0) return "is not executable";
  return {};
}

}  // namespace

std::vector<std::string> worker_argv(const LaunchConfig& config) {
  std::vector<std::string> argv;
  switch (config.program_kind) {
    case ProgramKind::PythonScript:
      argv = {config.python, "-u", config.program};
      break;
    case ProgramKind::PythonModule:
      argv = {config.python, "-u", "-m", config.program};
      break;
    case ProgramKind::PythonRunPath:
      // torchrun's run_script_path: sys.argv = [script, args...], then runpy.run_path(script,
      // run_name="__main__") inside the worker's interpreter.
      argv = {config.python, "-u", "-c", std::string(kRunPathBootstrap), config.program};
      break;
    case ProgramKind::Executable:
      argv = {config.program};
      break;
  }
  argv.insert(argv.end(), config.program_args.begin(), config.program_args.end());
  return argv;
}

Result<std::string> resolve_executable(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) {
    std::string why = why_not_runnable(name);
    if (why.empty()) return name;
    return not_executable(fmt::format("cannot run '{}': {}", name, why));
  }
  std::string first_problem;
  size_t start = 0;
  while (start <= path_env.size()) {
    size_t colon = path_env.find(':', start);
    std::string dir = path_env.substr(start, colon == std::string::npos ? colon : colon - start);
    if (dir.empty()) dir.push_back('.');  // an empty PATH entry means the current directory
    std::string candidate = fmt::format("{}/{}", dir, name);
    std::string why = why_not_runnable(candidate);
    if (why.empty()) return candidate;
    if (first_problem.empty() && why != std::strerror(ENOENT) && why != std::strerror(ENOTDIR)) {
      first_problem = fmt::format("cannot run '{}': {} {}", name, candidate, why);
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (!first_problem.empty()) return not_executable(first_problem);
  return not_executable(fmt::format("cannot run '{}': not found on PATH", name));
}

Result<std::string> resolve_worker_executable(const LaunchConfig& config,
                                              const std::string& path_env) {
  if (config.program_kind == ProgramKind::Executable) {
    return resolve_executable(config.program, path_env);
  }
  auto python = resolve_executable(config.python, path_env);
  if (!python) {
    return not_executable(fmt::format("{} (the Python interpreter; set --python or PYTHON_EXEC)",
                                      python.error().message));
  }
  if (config.program_kind == ProgramKind::PythonScript ||
      config.program_kind == ProgramKind::PythonRunPath) {
    struct stat st {};
    if (::stat(config.program.c_str(), &st) != 0) {
      return not_executable(
          fmt::format("cannot run '{}': {}", config.program, std::strerror(errno)));
    }
    if (S_ISDIR(st.st_mode)) {
      return not_executable(fmt::format("cannot run '{}': is a directory", config.program));
    }
    if (::access(config.program.c_str(), R_OK) != 0) {
      return not_executable(fmt::format("cannot run '{}': not readable", config.program));
    }
  }
  return python;
}

std::optional<std::string> venv_python_beside(const std::string& executable) {
  const auto slash = executable.rfind('/');
  if (slash == std::string::npos) return std::nullopt;
  const std::string bin = executable.substr(0, slash);
  const auto parent = bin.rfind('/');
  const std::string root = parent == std::string::npos ? "." : bin.substr(0, parent);
  if (::access((root + "/pyvenv.cfg").c_str(), R_OK) != 0) return std::nullopt;
  for (const char* name : {"/python3", "/python"}) {
    if (::access((bin + name).c_str(), X_OK) == 0) return bin + name;
  }
  return std::nullopt;
}

}  // namespace ddp::launcher
