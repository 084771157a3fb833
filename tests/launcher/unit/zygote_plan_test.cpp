// SPDX-License-Identifier: MIT
// --preload's pure decisions (launcher/process/zygote_plan.hpp) and the flag's validation.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "launcher/config/cli.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/config/program.hpp"
#include "launcher/process/zygote.hpp"
#include "launcher/process/zygote_plan.hpp"
#include "launcher/process/zygote_script.hpp"

using namespace ddp::launcher;

namespace {

Result<ConfiguredLaunch> configure_preload(const std::vector<std::string>& args) {
  HostFacts host;
  host.cpu_count = 4;
  auto parsed = parse_command_line(args);
  if (!parsed) return parsed.error();
  return config_from_options(parsed->raw, host);
}

}  // namespace

TEST_CASE("the worker command lines ddprun builds parse into what the zygote runs") {
  LaunchConfig c;
  c.python = "python3";
  c.program = "train.py";
  c.program_args = {"--lr", "0.1", "-m", "x"};
  c.program_kind = ProgramKind::PythonScript;
  auto script = parse_python_invocation(worker_argv(c));
  REQUIRE(script);
  CHECK(script->interpreter == std::vector<std::string>{"python3", "-u"});
  CHECK(script->mode == "script");
  CHECK(script->target == "train.py");
  CHECK(script->args == c.program_args);  // the program's own -m is an argument

  c.program_kind = ProgramKind::PythonModule;
  c.program = "pkg.main";
  auto module = parse_python_invocation(worker_argv(c));
  REQUIRE(module);
  CHECK(module->mode == "module");
  CHECK(module->target == "pkg.main");

  c.program_kind = ProgramKind::PythonRunPath;
  c.program = "tool";
  auto code = parse_python_invocation(worker_argv(c));
  REQUIRE(code);
  CHECK(code->mode == "code");
  CHECK(code->target == kRunPathBootstrap);
  CHECK(code->args.front() == "tool");
}

TEST_CASE("command lines the zygote cannot reproduce are exec'd") {
  CHECK_FALSE(parse_python_invocation({}));
  CHECK_FALSE(parse_python_invocation({"python3"}));
  CHECK_FALSE(parse_python_invocation({"python3", "-u"}));
  CHECK_FALSE(parse_python_invocation({"python3", "-m"}));
  CHECK_FALSE(parse_python_invocation({"python3", "-"}));                // stdin
  CHECK_FALSE(parse_python_invocation({"python3", "-W", "x", "a.py"}));  // a flag with a value
  CHECK_FALSE(parse_python_invocation({"python3", "--check-hash-based-pycs", "a.py"}));
  auto flags = parse_python_invocation({"py", "-uB", "-s", "a.py", "b"});
  REQUIRE(flags);
  CHECK(flags->interpreter == std::vector<std::string>{"py", "-uB", "-s"});

  auto zygote = *parse_python_invocation({"python3", "-u", "a.py"});
  CHECK(zygote_can_serve(zygote, *parse_python_invocation({"python3", "-u", "b.py", "x"})));
  CHECK(zygote_can_serve(zygote, *parse_python_invocation({"python3", "-u", "-m", "mod"})));
  CHECK_FALSE(zygote_can_serve(zygote, *parse_python_invocation({"python3", "b.py"})));
  CHECK_FALSE(zygote_can_serve(zygote, *parse_python_invocation({"python3.12", "-u", "a.py"})));
}

TEST_CASE("a worker whose argv or environment is not UTF-8 is not sent to the zygote") {
  CHECK(all_utf8({"", "plain", "caf\xc3\xa9", "\xf0\x9f\x98\x80", "X=\xe2\x82\xac"}));
  CHECK_FALSE(all_utf8({"ok", "h\xff\xfex"}));
  CHECK_FALSE(all_utf8({"\xc3"}));              // cut short
  CHECK_FALSE(all_utf8({"\xc0\xaf"}));          // overlong
  CHECK_FALSE(all_utf8({"\xed\xa0\x80"}));      // a surrogate
  CHECK_FALSE(all_utf8({"\xf4\x90\x80\x80"}));  // past U+10FFFF
}

TEST_CASE("when a worker is forked, respawns the zygote first, or is exec'd") {
  CHECK(choose_worker_start(false, true, true) == WorkerStart::Exec);
  CHECK(choose_worker_start(true, true, false) == WorkerStart::Exec);
  CHECK(choose_worker_start(true, false, false) == WorkerStart::Exec);
  CHECK(choose_worker_start(true, true, true) == WorkerStart::Fork);
  CHECK(choose_worker_start(true, false, true) == WorkerStart::RespawnThenFork);
}

TEST_CASE("the zygote's command line keeps the workers' interpreter and flags") {
  auto workers = *parse_python_invocation({"/opt/py", "-u", "dir/train.py", "--x"});
  auto argv = zygote_argv(workers, 3, {"torch", "numpy"});
  CHECK(argv == std::vector<std::string>{"/opt/py", "-u", "-c", std::string(kZygoteBootstrap), "3",
                                         "script", "dir/train.py", "torch", "numpy"});
  auto code = *parse_python_invocation({"/opt/py", "-u", "-c", "print(1)", "a"});
  CHECK(zygote_argv(code, 3, {"json"})[6] == "-");
}

TEST_CASE("the zygote's greeting and replies") {
  auto ready = parse_zygote_hello(R"({"ready": true, "seconds": 2.5})");
  REQUIRE(std::holds_alternative<ZygoteReady>(ready));
  CHECK(std::get<ZygoteReady>(ready).import_seconds == doctest::Approx(2.5));
  auto refused = parse_zygote_hello(R"({"refused": "preload import failed: X"})");
  CHECK(std::get<std::string>(refused) == "preload import failed: X");
  CHECK(std::holds_alternative<std::string>(parse_zygote_hello("garbage")));
  CHECK(std::holds_alternative<std::string>(parse_zygote_hello(R"({"ready": false})")));
  CHECK(std::get<int>(parse_zygote_reply(R"({"pid": 4242})")) == 4242);
  CHECK(std::get<std::string>(parse_zygote_reply(R"({"error": "fork failed"})")) == "fork failed");
  CHECK(std::holds_alternative<std::string>(parse_zygote_reply(R"({"pid": 1})")));
  CHECK(std::holds_alternative<std::string>(parse_zygote_reply("")));
}

TEST_CASE("--preload: a comma list of modules, for Python programs only") {
  auto ok = configure_preload({"--preload", "torch,numpy.linalg,_x1", "train.py"});
  REQUIRE(ok.ok());
  CHECK(ok->config.preload == std::vector<std::string>{"torch", "numpy.linalg", "_x1"});
  auto module = configure_preload({"--preload", "torch", "-m", "pkg.train"});
  REQUIRE(module.ok());
  CHECK(module->config.preload == std::vector<std::string>{"torch"});
  auto none = configure_preload({"train.py"});
  REQUIRE(none.ok());
  CHECK(none->config.preload.empty());
  for (const auto& bad : {"", "torch,,numpy", "torch,", "1x", "a..b", "a-b", "torch numpy"}) {
    auto r = configure_preload({"--preload", bad, "train.py"});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().exit_code == 2);
    CHECK(r.error().message.find("--preload:") == 0);
  }
  auto binary = configure_preload({"--preload", "torch", "./worker"});
  REQUIRE_FALSE(binary.ok());
  CHECK(binary.error().exit_code == 2);
  CHECK(binary.error().message ==
        "--preload: './worker' is not a Python program (.py or -m); only those can be preloaded");
  auto no_python = configure_preload({"--preload", "torch", "--no-python", "t.py"});
  REQUIRE_FALSE(no_python.ok());
  CHECK(no_python.error().exit_code == 2);
}

TEST_CASE("the zygote's environment is what every local rank shares") {
  CHECK(common_environment({}).empty());
  EnvMap only{{"RANK", "0"}, {"OMP_NUM_THREADS", "1"}};
  CHECK(common_environment({only}) == only);
  EnvMap r0{{"RANK", "0"}, {"OMP_NUM_THREADS", "1"}, {"PATH", "/bin"}, {"ONLY0", "x"}};
  EnvMap r1{{"RANK", "1"}, {"OMP_NUM_THREADS", "1"}, {"PATH", "/bin"}};
  CHECK(common_environment({r0, r1}) == EnvMap{{"OMP_NUM_THREADS", "1"}, {"PATH", "/bin"}});
}

TEST_CASE("a forked worker's request carries what the exec path applies") {
  SpawnRequest request{"/usr/bin/python3",
                       {"/usr/bin/python3", "-u", "train.py", "--lr", "0.1"},
                       {"RANK=1", "BIG=" + std::string(200'000, 'x')},
                       5,
                       6};
  request.cpu_affinity = {2, 3};
  request.preferred_memory_node = 0;
  auto program = *parse_python_invocation(request.argv);
  auto json = nlohmann::json::parse(worker_description(request, program, {"stdout", "stderr"}));
  CHECK(json["mode"] == "script");
  CHECK(json["target"] == "train.py");
  CHECK(json["args"] == nlohmann::json({"--lr", "0.1"}));
  CHECK(json["orig_argv"] == nlohmann::json(request.argv));
  CHECK(json["env"].size() == 2);
  CHECK(json["env"][1].get<std::string>().size() == 200'004);  // no limit of a datagram's
  CHECK(json["cpus"] == nlohmann::json({2, 3}));
  CHECK(json["memory_node"] == 0);  // --numa-binding's MPOL_PREFERRED, as exec_child() sets it
  CHECK(json["fds"] == nlohmann::json({"stdout", "stderr"}));
  CHECK(json.contains("cwd"));
  CHECK(json.contains("umask"));
  CHECK(json["parent"].get<int>() > 1);
}

TEST_CASE("--preload-timeout") {
  auto ok = configure_preload({"--preload", "torch", "--preload-timeout", "2.5", "t.py"});
  REQUIRE(ok.ok());
  CHECK(ok->config.preload_timeout == std::chrono::milliseconds(2500));
  auto standard = configure_preload({"--preload", "torch", "t.py"});
  REQUIRE(standard.ok());
  CHECK(standard->config.preload_timeout == std::chrono::seconds(300));
  for (const char* bad : {"0", "-1", "soon"}) {
    auto r = configure_preload({"--preload", "torch", "--preload-timeout", bad, "t.py"});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().exit_code == 2);
    CHECK(r.error().message.find("--preload-timeout") != std::string::npos);
  }
}
