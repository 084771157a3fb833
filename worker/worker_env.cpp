// SPDX-License-Identifier: MIT
#include "ddprun/worker/worker_env.hpp"

#include <charconv>
#include <cstdlib>

namespace ddp::worker {
namespace {

std::string describe(std::string_view name, const std::string& value, std::string_view why) {
  return std::string(name) + "='" + value + "' " + std::string(why);
}

long long parse_integer(std::string_view name, const std::string& value, long long min,
                        long long max) {
  long long out = 0;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(first, last, out);
  if (value.empty() || ec != std::errc() || ptr != last) {
    throw WorkerEnvError(describe(name, value, "is not an integer"));
  }
  if (out < min || out > max) {
    throw WorkerEnvError(describe(
        name, value, "is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]"));
  }
  return out;
}

bool parse_bool(std::string_view name, const std::string& value) {
  // PyTorch accepts "True"/"1" and treats everything else as false; we reject typos instead.
  if (value == "1" || value == "True" || value == "true") return true;
  if (value == "0" || value == "False" || value == "false" || value.empty()) return false;
  throw WorkerEnvError(describe(name, value, "is not a boolean (True/False/1/0)"));
}

}  // namespace

std::string WorkerEnv::agent_store_prefix() const {
  return "/worker/attempt_" + std::to_string(restart_count);
}

WorkerEnv parse_worker_env(const EnvLookup& lookup) {
  constexpr long long kMaxWorld = 1 << 24;
  WorkerEnv env;
  const auto rank = lookup("RANK");
  const auto world = lookup("WORLD_SIZE");
  const auto addr = lookup("MASTER_ADDR");
  const auto port = lookup("MASTER_PORT");
  if (!rank && !world && !addr && !port) return env;  // not launched: a one-process world

  auto require = [&](std::string_view name, const std::optional<std::string>& v) {
    if (!v) {
      throw WorkerEnvError(std::string(name) +
                           " is not set (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT must all "
                           "be set; start the worker with ddprun or torchrun)");
    }
    return *v;
  };
  env.launched = true;
  env.world_size =
      static_cast<int>(parse_integer("WORLD_SIZE", require("WORLD_SIZE", world), 1, kMaxWorld));
  env.rank = static_cast<int>(parse_integer("RANK", require("RANK", rank), 0, env.world_size - 1));
  env.master_addr = require("MASTER_ADDR", addr);
  if (env.master_addr.empty()) throw WorkerEnvError("MASTER_ADDR is empty");
  env.master_port = static_cast<std::uint16_t>(
      parse_integer("MASTER_PORT", require("MASTER_PORT", port), 1, 65535));

  const auto local_world = lookup("LOCAL_WORLD_SIZE");
  env.local_world_size_set = local_world.has_value();
  env.local_world_size =
      local_world
          ? static_cast<int>(parse_integer("LOCAL_WORLD_SIZE", *local_world, 1, env.world_size))
          : env.world_size;
  const auto local_rank = lookup("LOCAL_RANK");
  env.local_rank =
      local_rank
          ? static_cast<int>(parse_integer("LOCAL_RANK", *local_rank, 0, env.local_world_size - 1))
          : env.rank % env.local_world_size;
  if (const auto restarts = lookup("TORCHELASTIC_RESTART_COUNT")) {
    env.restart_count =
        static_cast<int>(parse_integer("TORCHELASTIC_RESTART_COUNT", *restarts, 0, 1 << 30));
  }
  if (const auto file = lookup("TORCHELASTIC_ERROR_FILE")) env.error_file = *file;
  if (const auto run_id = lookup("TORCHELASTIC_RUN_ID")) env.run_id = *run_id;
  if (const auto agent = lookup("TORCHELASTIC_USE_AGENT_STORE")) {
    env.use_agent_store = parse_bool("TORCHELASTIC_USE_AGENT_STORE", *agent);
  }
  return env;
}

WorkerEnv worker_env_from_environment() {
  return parse_worker_env([](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace ddp::worker
