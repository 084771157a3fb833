// SPDX-License-Identifier: MIT
// OutputSink against real descriptors of every kind (a socket that stops reading, a regular file,
// /dev/full), the ownership rules for reclaiming dead runs' leftovers, and the summary's wording
// for ranks that never started and for log files that failed.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "launcher/output/output_sink.hpp"
#include "launcher/process/run_ownership.hpp"
#include "launcher/run/failure_report.hpp"

using namespace ddp::launcher;
namespace fs = std::filesystem;

namespace {

std::string temp_dir() {
  char templ[] = "/tmp/ddprun_unit_XXXXXX";
  REQUIRE(::mkdtemp(templ) != nullptr);
  return templ;
}

std::string read_available(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
    out.append(buf, static_cast<size_t>(n));
  return out;
}

}  // namespace

TEST_CASE(
    "a socket that stops reading: writes never block, the sink congests, then drains in order") {
  boost::asio::io_context io;
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  {
    OutputSink sink(io, fds[0]);
    CHECK(sink.mode() == OutputSink::Mode::Socket);
    std::string expected;
    for (int i = 0; !sink.congested(); ++i) {  // returns at once every time: nobody reads yet
      std::string line = "line " + std::to_string(i) + " " + std::string(100, 'x') + "\n";
      sink.write_all(line);
      expected += line;
    }
    bool resumed = false;
    sink.when_drained([&] { resumed = true; });
    std::string got;
    while (!sink.idle()) {
      got += read_available(fds[1]);
      io.poll();
    }
    got += read_available(fds[1]);
    CHECK(resumed);
    CHECK(got == expected);
  }
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("when_waited_on: told once another writer waits behind an open line, not before") {
  boost::asio::io_context io;
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  {
    OutputSink sink(io, fds[0]);
    int a = 0, b = 0, c = 0;  // three writers
    int told_a = 0, told_b = 0;
    auto run = [&] {  // what is posted now (poll() stops the context once it runs out)
      io.restart();
      io.poll();
    };
    sink.write_lines(&a, "aaaa", /*line_open=*/true);
    sink.when_waited_on(&a, [&] { ++told_a; });
    run();
    CHECK(told_a == 0);  // nobody waits: the open line may hold the console
    sink.write_lines(&a, "aa", true);
    run();
    CHECK(told_a == 0);                  // the owner's own output is no waiter
    sink.write_lines(&b, "bbbb", true);  // b's own long line, held behind a's
    sink.when_waited_on(&b, [&] { ++told_b; });
    run();
    CHECK(told_a == 1);                  // b waits
    CHECK(told_b == 0);                  // b does not own the console yet
    sink.write_lines(&c, "c\n", false);  // c waits behind a, then behind b
    sink.write_lines(&a, "\n", false);   // a's line ends: b's goes out and owns the console
    run();
    CHECK(told_a == 1);
    CHECK(told_b == 1);                  // c still waits, behind b now
    sink.write_lines(&b, "b\n", false);  // b's line ends: c's goes out
    run();
    CHECK(read_available(fds[1]) == "aaaaaa\nbbbbb\nc\n");
    // A registration for a line that ended is dropped: a later waiter does not call it.
    int told_again = 0;
    sink.write_lines(&a, "x", true);
    sink.when_waited_on(&a, [&] { ++told_again; });
    sink.write_lines(&a, "\n", false);
    sink.write_lines(&b, "y", true);
    sink.write_lines(&c, "z\n", false);
    run();
    CHECK(told_again == 0);
  }
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("a regular file is written by the writer thread; drain_all waits for it") {
  boost::asio::io_context io;
  const std::string dir = temp_dir();
  const std::string path = dir + "/out.log";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  std::string expected;
  {
    OutputSink sink(io, fd, /*owns_fd=*/true);
    CHECK(sink.mode() == OutputSink::Mode::Thread);
    for (int i = 0; i < 30000; ++i) {
      std::string line = std::to_string(i) + std::string(90, 'y') + "\n";
      sink.write_all(line);
      expected += line;
    }
    CHECK(OutputSink::drain_all(io, std::chrono::seconds(10), std::chrono::seconds(30)) == 0);
    CHECK(sink.idle());
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == expected);
  fs::remove_all(dir);
}

TEST_CASE(
    "a write error other than EPIPE reaches the error handler once, with the unwritten bytes") {
  boost::asio::io_context io;
  int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;  // no /dev/full here
  OutputSink sink(io, fd, /*owns_fd=*/true);
  int calls = 0;
  int error = 0;
  std::string rest;
  sink.on_error([&](int e, std::string unwritten) {
    ++calls;
    error = e;
    rest = std::move(unwritten);
  });
  sink.write_all("first line\n");
  sink.write_all("second line\n");  // dropped: the sink has failed
  io.poll();
  CHECK(calls == 1);
  CHECK(error == ENOSPC);
  CHECK(rest == "first line\n");
  CHECK(sink.failed());
}

TEST_CASE("leftovers of dead runs: name, owner liveness and lock") {
  CHECK(owner_pid_of("ddprun-1234-abcdef") == 1234);
  CHECK_FALSE(owner_pid_of("ddprun_abcdef").has_value());  // the kept-logs pattern: never reclaimed
  CHECK_FALSE(owner_pid_of("ddprun-1234").has_value());
  CHECK_FALSE(owner_pid_of("ddprun--abc").has_value());
  CHECK_FALSE(owner_pid_of("ddprun-1-abc").has_value());
  CHECK(owned_name_prefix() == "ddprun-" + std::to_string(::getpid()) + "-");

  const std::string parent = temp_dir();
  // A pid that is certainly dead: a child we reaped.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string dead_run = parent + "/ddprun-" + std::to_string(dead) + "-aaaaaa";
  const std::string live_run = parent + "/" + owned_name_prefix() + "bbbbbb";
  const std::string locked_dead = parent + "/ddprun-" + std::to_string(dead) + "-cccccc";
  const std::string other = parent + "/ddprun_dddddd";
  for (const auto& d : {dead_run, live_run, locked_dead, other}) fs::create_directory(d);
  auto lock = DirectoryLock::acquire(locked_dead);  // a live holder (pid namespaces, say)
  REQUIRE(lock);
  auto found = abandoned_entries(parent);
  CHECK(found == std::vector<std::string>{dead_run});
  lock.reset();
  found = abandoned_entries(parent);
  CHECK(found.size() == 2);
  fs::remove_all(parent);
}

TEST_CASE(
    "summary: a rank that never started is not 'terminated by ddprun'; failed log files are "
    "listed") {
  RunSummaryInput in;
  in.program = "train.py";
  in.exit_code = 127;
  AttemptOutcome a;
  WorkerOutcome root;
  root.status = ExitStatus::exited(127);
  root.start_error = "cannot execute 'x': No such file or directory";
  WorkerOutcome never;
  never.rank = 1;
  never.local_rank = 1;
  never.status = ExitStatus::exited(127);
  never.start_error = "cannot execute 'x': No such file or directory";
  never.terminated_by_ddprun = true;
  a.workers = {root, never};
  a.root_cause = 0;
  in.attempts = {a};
  in.log_errors = {
      "/logs/attempt_0/0/stdout.log: No space left on device (what it did not take "
      "went to the console)"};
  const std::string text = format_failure_summary(in);
  CHECK(text.find("rank 1 (local_rank 1, pid 0): could not start") != std::string::npos);
  CHECK(text.find("[terminated by ddprun]") == std::string::npos);
  CHECK(
      text.find("Output that could not be written:\n  /logs/attempt_0/0/stdout.log: No space left "
                "on device (what it did not take went to the console)\n") != std::string::npos);
}
