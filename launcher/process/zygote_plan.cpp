// SPDX-License-Identifier: MIT
#include "launcher/process/zygote_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "launcher/process/zygote_script.hpp"

namespace ddp::launcher {
namespace {

/// Interpreter flags that take no value (python3 --help); anything else is not served.
bool is_python_plain_flag(const std::string& arg) {
  if (arg.size() < 2 || arg[0] != '-' || arg[1] == '-') return false;
  static const std::string kPlain = "bBdEhiIOPqsSuvx";
  for (size_t i = 1; i < arg.size(); ++i) {
    if (kPlain.find(arg[i]) == std::string::npos) return false;
  }
  return true;
}

}  // namespace

std::optional<PythonInvocation> parse_python_invocation(const std::vector<std::string>& argv) {
  if (argv.empty()) return std::nullopt;
  PythonInvocation out;
  out.interpreter.push_back(argv[0]);
  size_t i = 1;
  while (i < argv.size() && argv[i] != "-m" && argv[i] != "-c" && is_python_plain_flag(argv[i]))
    out.interpreter.push_back(argv[i++]);
  if (i >= argv.size()) return std::nullopt;
  if (argv[i] == "-m" || argv[i] == "-c") {
    if (i + 1 >= argv.size()) return std::nullopt;
    out.mode = argv[i] == "-m" ? "module" : "code";
    out.target = argv[i + 1];
    i += 2;
  } else {
    if (argv[i].empty() || argv[i][0] == '-')
      return std::nullopt;  // stdin, or a flag we don't know
    out.mode = "script";
    out.target = argv[i++];
  }
  out.args.assign(argv.begin() + static_cast<long>(i), argv.end());
  return out;
}

std::vector<std::string> zygote_argv(const PythonInvocation& workers, int socket_fd,
                                     const std::vector<std::string>& modules) {
  std::vector<std::string> argv = workers.interpreter;
  argv.insert(argv.end(), {"-c", std::string(kZygoteBootstrap), std::to_string(socket_fd),
                           workers.mode, workers.mode == "code" ? "-" : workers.target});
  argv.insert(argv.end(), modules.begin(), modules.end());
  return argv;
}

bool zygote_can_serve(const PythonInvocation& zygote, const PythonInvocation& worker) {
  return zygote.interpreter == worker.interpreter;
}

namespace {

bool is_utf8(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned char c = *p;
    size_t more = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++p;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      more = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      more = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      more = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (static_cast<size_t>(end - p) <= more) return false;
    for (size_t i = 1; i <= more; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    // Overlong forms, surrogates and past U+10FFFF are not UTF-8.
    static constexpr uint32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kSmallest[more] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    p += more + 1;
  }
  return true;
}

}  // namespace

bool all_utf8(const std::vector<std::string>& strings) {
  return std::all_of(strings.begin(), strings.end(), is_utf8);
}

EnvMap common_environment(const std::vector<EnvMap>& per_rank) {
  if (per_rank.empty()) return {};
  EnvMap common = per_rank.front();
  for (size_t r = 1; r < per_rank.size(); ++r) {
    std::erase_if(common, [&](const auto& entry) {
      auto it = per_rank[r].find(entry.first);
      return it == per_rank[r].end() || it->second != entry.second;
    });
  }
  return common;
}

WorkerStart choose_worker_start(bool preload_enabled, bool zygote_alive, bool can_serve) {
  if (!preload_enabled || !can_serve) return WorkerStart::Exec;
  return zygote_alive ? WorkerStart::Fork : WorkerStart::RespawnThenFork;
}

std::variant<ZygoteReady, std::string> parse_zygote_hello(const std::string& message) {
  auto json = nlohmann::json::parse(message, nullptr, false);
  if (!json.is_object()) return std::string("the preloaded interpreter sent no valid greeting");
  if (json.contains("refused") && json["refused"].is_string())
    return json["refused"].get<std::string>();
  if (json.value("ready", false)) return ZygoteReady{json.value("seconds", 0.0)};
  return std::string("the preloaded interpreter sent no valid greeting");
}

std::variant<int, std::string> parse_zygote_reply(const std::string& message) {
  auto json = nlohmann::json::parse(message, nullptr, false);
  if (json.is_object() && json.contains("pid") && json["pid"].is_number_integer() &&
      json["pid"].get<int>() > 1) {
    return json["pid"].get<int>();
  }
  if (json.is_object() && json.contains("error") && json["error"].is_string())
    return json["error"].get<std::string>();
  return std::string("the preloaded interpreter gave no worker pid");
}

}  // namespace ddp::launcher
