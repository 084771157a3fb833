// SPDX-License-Identifier: MIT
// Unit tests of the worker's launcher contract (no LibTorch, no processes).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "ddprun/worker/error_file.hpp"
#include "ddprun/worker/worker_env.hpp"

using ddp::worker::parse_worker_env;
using ddp::worker::WorkerEnvError;

namespace {

ddp::worker::EnvLookup lookup_in(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> full_env() {
  return {{"RANK", "3"},
          {"LOCAL_RANK", "1"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RESTART_COUNT", "2"},
          {"TORCHELASTIC_ERROR_FILE", "/tmp/e.json"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
}

std::string error_for(std::map<std::string, std::string> vars) {
  try {
    parse_worker_env(lookup_in(std::move(vars)));
  } catch (const WorkerEnvError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the full torchrun environment is parsed") {
  const auto env = parse_worker_env(lookup_in(full_env()));
  CHECK(env.launched);
  CHECK(env.rank == 3);
  CHECK(env.local_rank == 1);
  CHECK(env.world_size == 4);
  CHECK(env.local_world_size == 2);
  CHECK(env.master_addr == "10.0.0.1");
  CHECK(env.master_port == 29500);
  CHECK(env.restart_count == 2);
  CHECK(env.error_file == "/tmp/e.json");
  CHECK(env.use_agent_store);
  CHECK(env.agent_store_prefix() == "/worker/attempt_2");
}

TEST_CASE("no launcher variables at all is a one-process world") {
  const auto env = parse_worker_env(lookup_in({}));
  CHECK_FALSE(env.launched);
  CHECK(env.world_size == 1);
  CHECK(env.rank == 0);
}

TEST_CASE("local rank and size default to the global ones, restart count to 0") {
  const auto env = parse_worker_env(
      lookup_in({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}));
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 2);
  CHECK(env.restart_count == 0);
  CHECK_FALSE(env.use_agent_store);
}

TEST_CASE("a missing required variable is named") {
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    auto vars = full_env();
    vars.erase(name);
    CHECK(error_for(vars).rfind(std::string(name) + " is not set", 0) == 0);
  }
}

TEST_CASE("malformed values are named with the value") {
  auto with = [](const char* name, const char* value) {
    auto vars = full_env();
    vars[name] = value;
    return error_for(vars);
  };
  CHECK(with("RANK", "two") == "RANK='two' is not an integer");
  CHECK(with("RANK", "4") == "RANK='4' is out of range [0, 3]");
  CHECK(with("WORLD_SIZE", "0") == "WORLD_SIZE='0' is out of range [1, 16777216]");
  CHECK(with("MASTER_PORT", "70000") == "MASTER_PORT='70000' is out of range [1, 65535]");
  CHECK(with("LOCAL_RANK", "2") == "LOCAL_RANK='2' is out of range [0, 1]");
  CHECK(with("LOCAL_RANK", "1 ") == "LOCAL_RANK='1 ' is not an integer");
  CHECK(with("TORCHELASTIC_RESTART_COUNT", "-1").find("out of range") != std::string::npos);
  CHECK(with("TORCHELASTIC_USE_AGENT_STORE", "yes") ==
        "TORCHELASTIC_USE_AGENT_STORE='yes' is not a boolean (True/False/1/0)");
  CHECK(with("MASTER_ADDR", "") == "MASTER_ADDR is empty");
}

TEST_CASE("agent store flag accepts PyTorch's spellings") {
  for (auto [value, expected] : std::vector<std::pair<const char*, bool>>{
           {"True", true}, {"1", true}, {"true", true}, {"False", false}, {"0", false}}) {
    auto vars = full_env();
    vars["TORCHELASTIC_USE_AGENT_STORE"] = value;
    CHECK(parse_worker_env(lookup_in(vars)).use_agent_store == expected);
  }
}

TEST_CASE("error file JSON has PyTorch's ErrorHandler layout") {
  const auto json = nlohmann::json::parse(
      ddp::worker::error_file_json("std::runtime_error: boom", "trace\nline", 1700000000));
  CHECK(json["message"]["message"] == "std::runtime_error: boom");
  CHECK(json["message"]["extraInfo"]["py_callstack"] == "trace\nline");
  CHECK(json["message"]["extraInfo"]["timestamp"] == "1700000000");
  CHECK(json.size() == 1);
  CHECK(json["message"].size() == 2);
}

TEST_CASE("run_reporting_errors turns an exception into exit code 1 and an error file") {
  const std::string path = "/tmp/ddp_worker_env_test_error_" + std::to_string(::getpid()) + ".json";
  const int code = ddp::worker::run_reporting_errors(
      path, []() -> int { throw std::invalid_argument("bad shape"); });
  CHECK(code == 1);
  std::ifstream in(path);
  const auto json = nlohmann::json::parse(in);
  CHECK(json["message"]["message"] == "std::invalid_argument: bad shape");
  std::remove(path.c_str());
  CHECK(ddp::worker::run_reporting_errors(path, [] { return 7; }) == 7);
}

TEST_CASE("a message with bytes that are not UTF-8 still gives a valid error file (defect 4)") {
  const std::string bad = std::string(
      "Fashion-MNIST file not found: /data/caf\xe9/x.gz, torn \xe2\x82 and ok \xc3\xa9");
  std::string json_text;
  CHECK_NOTHROW(json_text = ddp::worker::error_file_json(bad, "stack \xff", 1));
  const auto json = nlohmann::json::parse(json_text);
  CHECK(json["message"]["message"] ==
        "Fashion-MNIST file not found: /data/caf\\xe9/x.gz, torn \\xe2\\x82 and ok \xc3\xa9");
  CHECK(json["message"]["extraInfo"]["py_callstack"] == "stack \\xff");
  CHECK(ddp::worker::printable_utf8("\xed\xa0\x80") ==
        "\\xed\\xa0\\x80");  // a surrogate is not UTF-8
  CHECK(ddp::worker::printable_utf8("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");

  const std::string path = "/tmp/ddp_worker_env_test_utf8_" + std::to_string(::getpid()) + ".json";
  const int code =
      ddp::worker::run_reporting_errors(path, [&]() -> int { throw std::runtime_error(bad); });
  CHECK(code == 1);
  std::ifstream in(path);
  const auto file = nlohmann::json::parse(in);
  CHECK(file["message"]["message"].get<std::string>().find("caf\\xe9") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("LOCAL_WORLD_SIZE must be set to say the ranks share a host (defect 5)") {
  auto vars = full_env();
  CHECK(parse_worker_env(lookup_in(vars)).all_ranks_on_this_host() ==
        (vars.at("LOCAL_WORLD_SIZE") == vars.at("WORLD_SIZE")));
  vars.erase("LOCAL_WORLD_SIZE");
  vars.erase("LOCAL_RANK");
  const auto env = parse_worker_env(lookup_in(vars));
  CHECK(env.local_world_size == env.world_size);  // thread sizing keeps its default
  CHECK_FALSE(env.local_world_size_set);
  CHECK_FALSE(env.all_ranks_on_this_host());
}
