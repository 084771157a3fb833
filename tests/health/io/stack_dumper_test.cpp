// SPDX-License-Identifier: MIT
// StackDumper against real processes with the real tools (skipped per tool when not installed).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "launcher/health/stack_dumper.hpp"
#include "loop_helpers.hpp"

using namespace ddp::launcher::health;
using ddp::testing::run_until;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

pid_t start(const std::vector<std::string>& argv) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> args;
    for (auto& a : const_cast<std::vector<std::string>&>(argv)) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

void stop(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// The Agent reaps every child with waitpid(-1); the tools must not be among them (the dumper
// reaps its own and reports how they ended). Playing the Agent's part here checks that too.
void reap_tools() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

/// The state letter of `pid` in /proc/PID/stat ('\0': no such process).
char proc_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return '\0';
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
}

/// Waits (bounded) until `pid` has ended and is not reaped yet.
bool wait_for_zombie(pid_t pid) {
  for (int i = 0; i < 1000 && proc_state(pid) != 'Z'; ++i) ::usleep(10'000);
  return proc_state(pid) == 'Z';
}

/// The first child of `pid` (waits, bounded, until it has one); -1 if none came.
pid_t child_of(pid_t pid) {
  const std::string path =
      "/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children";
  for (int i = 0; i < 1000; ++i) {
    std::ifstream children(path);
    pid_t child = -1;
    if (children >> child && child > 0) return child;
    ::usleep(10'000);
  }
  return -1;
}

/// Waits (bounded) until `pid` no longer runs (gone, or a zombie its new parent has not reaped).
bool wait_until_gone(pid_t pid) {
  auto gone = [pid] { return proc_state(pid) == '\0' || proc_state(pid) == 'Z'; };
  for (int i = 0; i < 1000 && !gone(); ++i) ::usleep(10'000);
  return gone();
}

/// The descriptors `pid` has open, sorted (after the tool's exec: the shell's are gone).
std::vector<int> open_descriptors(pid_t pid) {
  for (int i = 0; i < 500; ++i) {  // until the keeper's child has exec'd the tool
    std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline");
    std::string argv0;
    std::getline(cmdline, argv0, '\0');
    if (argv0 == "sleep") break;
    ::usleep(10'000);
  }
  std::vector<int> fds;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    fds.push_back(std::stoi(entry.path().filename().string()));
  std::sort(fds.begin(), fds.end());
  return fds;
}

std::string dump_dir() {
  char tmpl[] = "/tmp/ddprun-stacks-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

}  // namespace

TEST_CASE("native stacks of a non-Python process (eu-stack or gdb)") {
  StackTools tools = StackTools::find(std::getenv("PATH"));
  tools.py_spy.clear();
  if (tools.eu_stack.empty() && tools.gdb.empty()) {
    MESSAGE("neither eu-stack nor gdb installed; skipped");
    return;
  }
  boost::asio::io_context io;
  StackDumper dumper(io, tools, std::chrono::seconds(30));
  const std::string dir = dump_dir();
  pid_t sleeper = start({"sleep", "60"});
  ::usleep(100'000);  // let it exec
  std::optional<std::vector<StackResult>> results;
  dumper.dump({{3, sleeper, dir + "/stacks.txt"}}, "test",
              [&](std::vector<StackResult> r) { results = r; });
  CHECK(dumper.busy());
  CHECK(run_until(io, [&] {
    reap_tools();
    return results.has_value();
  }));
  CHECK_FALSE(dumper.busy());
  REQUIRE(results->size() == 1);
  CHECK((*results)[0].tool == (tools.eu_stack.empty() ? "gdb" : "eu-stack"));
  CHECK_FALSE((*results)[0].timed_out);
  std::string text = read_file(dir + "/stacks.txt");
  CHECK(text.find("# ddprun: stacks of rank 3 (pid " + std::to_string(sleeper) + ")") !=
        std::string::npos);
  // Both tools name the frames of a sleeping process: nanosleep / clock_nanosleep.
  CHECK(text.find("nanosleep") != std::string::npos);
  stop(sleeper);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Python stacks through py-spy name the sleeping line") {
  StackTools tools = StackTools::find(std::getenv("PATH"));
  if (tools.py_spy.empty()) {
    MESSAGE("py-spy not installed; skipped");
    return;
  }
  boost::asio::io_context io;
  StackDumper dumper(io, tools, std::chrono::seconds(30));
  const std::string dir = dump_dir();
  std::ofstream(dir + "/sleepy.py") << "import time\ndef stuck_here():\n    "
                                       "time.sleep(60)\nprint('ready', flush=True)\nstuck_here()\n";
  pid_t py = start({"python3", dir + "/sleepy.py"});
  // python3 may be a shim (pyenv) that execs the interpreter later, under load much later: the
  // tool is chosen by what the process is when the dump starts.
  for (int i = 0; i < 3000 && !is_python_process(py); ++i) ::usleep(10'000);
  ::usleep(500'000);
  std::optional<std::vector<StackResult>> results;
  dumper.dump({{0, py, dir + "/stacks.txt"}}, "test",
              [&](std::vector<StackResult> r) { results = r; });
  CHECK(run_until(io, [&] {
    reap_tools();
    return results.has_value();
  }));
  REQUIRE(results->size() == 1);
  CHECK((*results)[0].tool == "py-spy");
  std::string text = read_file(dir + "/stacks.txt");
  CHECK(text.find("stuck_here") != std::string::npos);
  CHECK(text.find("sleepy.py:3") != std::string::npos);
  stop(py);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a tool that overruns the limit is killed and the dump still completes") {
  // A stand-in "tool" that never ends: the limit must end it.
  const std::string dir = dump_dir();
  const std::string fake = dir + "/eu-stack";
  std::ofstream(fake) << "#!/bin/sh\necho partial\nexec sleep 600\n";
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  StackTools tools;
  tools.eu_stack = fake;
  boost::asio::io_context io;
  StackDumper dumper(io, tools, std::chrono::milliseconds(300));
  pid_t sleeper = start({"sleep", "60"});
  std::optional<std::vector<StackResult>> results;
  dumper.dump({{1, sleeper, dir + "/stacks.txt"}}, "test",
              [&](std::vector<StackResult> r) { results = r; });
  CHECK(run_until(io, [&] {
    reap_tools();
    return results.has_value();
  }));
  REQUIRE(results->size() == 1);
  CHECK((*results)[0].timed_out);
  std::string text = read_file(dir + "/stacks.txt");
  CHECK(text.find("partial") != std::string::npos);
  CHECK(text.find("did not finish in time; killed") != std::string::npos);
  stop(sleeper);
  reap_tools();
  std::filesystem::remove_all(dir);
}

TEST_CASE("no tool at all: the file says so and the dump completes") {
  boost::asio::io_context io;
  StackDumper dumper(io, StackTools{}, std::chrono::seconds(1));
  const std::string dir = dump_dir();
  std::optional<std::vector<StackResult>> results;
  dumper.dump({{0, ::getpid(), dir + "/stacks.txt"}}, "test",
              [&](std::vector<StackResult> r) { results = r; });
  CHECK(run_until(io, [&] { return results.has_value(); }));
  CHECK(read_file(dir + "/stacks.txt").find("no stack tool found") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("each tool's end is reported as it was, and the Agent's reaper never takes a tool") {
  // Stand-in tools: one that fails, one that is killed by someone else than the dumper.
  const std::string dir = dump_dir();
  const std::string failing = dir + "/eu-stack";
  std::ofstream(failing) << "#!/bin/sh\necho 'cannot attach' >&2\nexit 3\n";
  std::filesystem::permissions(failing, std::filesystem::perms::owner_all);
  StackTools tools;
  tools.eu_stack = failing;
  boost::asio::io_context io;
  StackDumper dumper(io, tools, std::chrono::seconds(30));
  std::optional<std::vector<StackResult>> results;
  dumper.dump({{0, ::getpid(), dir + "/stacks.txt"}}, "test",
              [&](std::vector<StackResult> r) { results = r; });
  // The Agent's reaper runs before the loop hears of the end (CI stop 42 met this order by
  // chance): once the tool's process is a zombie, waitpid(-1) must still pass it by.
  const auto started = dumper.tool_pids();
  REQUIRE(started.size() == 1);
  CHECK(wait_for_zombie(started[0]));
  reap_tools();
  CHECK(run_until(io, [&] {
    reap_tools();
    return results.has_value();
  }));
  REQUIRE(results->size() == 1);
  CHECK((*results)[0].outcome == "exit 3");
  CHECK_FALSE((*results)[0].timed_out);
  CHECK(read_file(dir + "/stacks.txt").find("ended with exit 3") != std::string::npos);

  const std::string hanging = dir + "/gdb";
  std::ofstream(hanging) << "#!/bin/sh\nexec sleep 600\n";
  std::filesystem::permissions(hanging, std::filesystem::perms::owner_all);
  StackTools slow;
  slow.gdb = hanging;
  StackDumper second(io, slow, std::chrono::seconds(30));
  results.reset();
  // A descriptor ddprun holds without close-on-exec (as its store's listening socket once was):
  // the tool must not inherit it (a ddprun SIGKILLed during a dump left tools holding its port).
  const int inherited = ::open("/dev/null", O_RDONLY);
  REQUIRE(inherited > 2);
  second.dump({{1, ::getpid(), dir + "/stacks1.txt"}}, "test",
              [&](std::vector<StackResult> r) { results = r; });
  const auto pids = second.tool_pids();
  REQUIRE(pids.size() == 1);
  reap_tools();  // the tool runs on: waitpid(-1) passes it by
  CHECK(::kill(pids[0], 0) == 0);
  const pid_t tool = child_of(pids[0]);  // the keeper's child: the tool itself
  REQUIRE(tool > 0);
  ::close(inherited);
  CHECK(open_descriptors(tool) == std::vector<int>{0, 1, 2});
  ::kill(pids[0], SIGKILL);  // as the Agent's leftover cleanup once did
  CHECK(run_until(io, [&] { return results.has_value(); }));
  CHECK((*results)[0].outcome == "signal 9");
  CHECK(wait_until_gone(tool));  // the keeper took its tool with it
  CHECK_FALSE((*results)[0].timed_out);
  CHECK(second.tool_pids().empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a stacks file a worker made a FIFO: no tool runs and the loop never blocks on it") {
  const std::string dir = dump_dir();
  const std::string fifo = dir + "/stacks.txt";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const std::string tool = dir + "/eu-stack";
  std::ofstream(tool) << "#!/bin/sh\nexit 0\n";
  std::filesystem::permissions(tool, std::filesystem::perms::owner_all);
  StackTools tools;
  tools.eu_stack = tool;
  boost::asio::io_context io;
  StackDumper dumper(io, tools, std::chrono::seconds(30));
  std::optional<std::vector<StackResult>> results;
  // Before the fix, opening the FIFO for writing blocked here until a reader came.
  dumper.dump({{0, ::getpid(), fifo}}, "test", [&](std::vector<StackResult> r) { results = r; });
  CHECK(run_until(io, [&] { return results.has_value(); }));
  REQUIRE(results->size() == 1);
  CHECK((*results)[0].outcome == "not started: not a regular file");
  CHECK(dumper.tool_pids().empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a tool that fails hands over to the next one (a pyenv shim without py-spy)") {
  const std::string dir = dump_dir();
  const std::string shim = dir + "/eu-stack";  // as a pyenv shim whose version lacks the tool
  std::ofstream(shim) << "#!/bin/sh\necho 'pyenv: eu-stack: command not found' >&2\nexit 127\n";
  const std::string gdb = dir + "/gdb";
  std::ofstream(gdb) << "#!/bin/sh\necho '#0  0x0000 in main ()'\n";
  for (const auto& tool : {shim, gdb})
    std::filesystem::permissions(tool, std::filesystem::perms::owner_all);
  StackTools tools;
  tools.eu_stack = shim;
  tools.gdb = gdb;
  boost::asio::io_context io;
  StackDumper dumper(io, tools, std::chrono::seconds(30));
  std::optional<std::vector<StackResult>> results;
  dumper.dump({{0, ::getpid(), dir + "/stacks.txt"}}, "test",
              [&](std::vector<StackResult> r) { results = r; });
  CHECK(run_until(io, [&] {
    reap_tools();
    return results.has_value();
  }));
  REQUIRE(results->size() == 1);
  CHECK((*results)[0].tool == "gdb");
  CHECK((*results)[0].outcome == "ok");
  const std::string text = read_file(dir + "/stacks.txt");
  CHECK(text.find("eu-stack ended with exit 127; trying gdb") != std::string::npos);
  CHECK(text.find("#0  0x0000 in main ()") != std::string::npos);

  // The last one failing too: its outcome stands, nothing more is tried.
  std::ofstream(gdb) << "#!/bin/sh\nexit 2\n";
  StackDumper again(io, tools, std::chrono::seconds(30));
  results.reset();
  again.dump({{0, ::getpid(), dir + "/stacks2.txt"}}, "test",
             [&](std::vector<StackResult> r) { results = r; });
  CHECK(run_until(io, [&] { return results.has_value(); }));
  CHECK((*results)[0].tool == "gdb");
  CHECK((*results)[0].outcome == "exit 2");
  CHECK(read_file(dir + "/stacks2.txt").find("gdb ended with exit 2\n") != std::string::npos);
  std::filesystem::remove_all(dir);
}
