#pragma once
// Loads an environment dump (fixtures/*.env: KEY=VALUE lines as `env` prints them; '#' comments).

#include <fstream>
#include <stdexcept>
#include <string>

#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler::testing {

inline Env load_env_fixture(const std::string& name) {
  std::string path = DDP_CLUSTER_FIXTURES;
  path.append("/").append(name);
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path);
  Env env;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) throw std::runtime_error("bad line in fixture " + name);
    env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

}  // namespace ddp::launcher::scheduler::testing
