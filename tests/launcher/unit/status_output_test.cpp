// SPDX-License-Identifier: MIT
// Exit-status mapping, the line framer, /proc/<pid>/stat parsing, error files and the summary.
#include <doctest/doctest.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <string>

#include "common/host_name.hpp"
#include "launcher/output/line_framer.hpp"
#include "launcher/process/process_table.hpp"
#include "launcher/run/dry_run.hpp"
#include "launcher/run/failure_report.hpp"
#include "launcher/status/exit_status.hpp"

using namespace ddp::launcher;

TEST_CASE("exit-status mapping follows the shell") {
  CHECK(shell_exit_code(ExitStatus::exited(0)) == 0);
  CHECK(shell_exit_code(ExitStatus::exited(3)) == 3);
  CHECK(shell_exit_code(ExitStatus::signaled(SIGKILL)) == 137);
  CHECK(shell_exit_code(ExitStatus::signaled(SIGSEGV)) == 139);
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_name(SIGTERM) == "SIGTERM");
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 32)
  // The launcher's own table (glibc 2.28 has no sigabbrev_np: the portable build) names every
  // signal as glibc does.
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    CHECK(signal_name(sig) == (abbrev ? std::string("SIG") + abbrev : "SIG" + std::to_string(sig)));
  }
#endif
  CHECK(describe(ExitStatus::exited(3)) == "exit code 3");
  CHECK(describe(ExitStatus::signaled(SIGSEGV, true)) == "signal SIGSEGV (11, core dumped)");
  // Real wait statuses from real children.
  pid_t p = fork();
  if (p == 0) _exit(5);
  int st = 0;
  waitpid(p, &st, 0);
  CHECK(exit_status_from_wait(st) == ExitStatus::exited(5));
  p = fork();
  if (p == 0) {
    raise(SIGKILL);
    _exit(0);
  }
  waitpid(p, &st, 0);
  CHECK(exit_status_from_wait(st) == ExitStatus::signaled(SIGKILL));
}

TEST_CASE("line framer: whole lines with the prefix, whatever the chunking") {
  const std::string input = "alpha\nbeta\n\ngamma delta\nlast-no-newline";
  const std::string expected = "P:alpha\nP:beta\nP:\nP:gamma delta\nP:last-no-newline\n";
  for (size_t chunk = 1; chunk <= input.size(); ++chunk) {
    LineFramer framer("P:");
    std::string out;
    for (size_t i = 0; i < input.size(); i += chunk) {
      std::string before = out;
      framer.frame(std::string_view(input).substr(i, chunk), out);
      // Output only ever grows by whole lines.
      CHECK((out.size() == before.size() || out.back() == '\n'));
    }
    CHECK(framer.pending() == std::string("last-no-newline").size());
    CHECK(framer.finish(out) == 1);
    CHECK(out == expected);
    CHECK(framer.finish(out) == 0);
  }
}

TEST_CASE("line framer bounds an endless line: past 1 MiB it is passed on, not held") {
  LineFramer framer("[r]:");
  std::string out;
  std::string blob(LineFramer::kMaxLineBytes + 10, 'z');
  framer.frame(blob, out);
  CHECK(framer.pending() == 0);
  CHECK(out.size() == blob.size() + 4);  // the prefix and the bytes, no newline added
  CHECK(framer.line_open());
}

TEST_CASE("line framer: a line that already has the prefix's text gets no second one") {
  // torch 2.x writes "[rank1]:" itself; the console prefix may be colored around the same text.
  const std::string input = "[rank1]: Traceback\nplain\n[rank1]:x\n[rank10]: other\n[ran";
  const std::string expected =
      "[rank1]: Traceback\nC[rank1]:Dplain\n[rank1]:x\nC[rank1]:D[rank10]: other\n"
      "C[rank1]:D[ran\n";
  for (size_t chunk = 1; chunk <= input.size(); ++chunk) {
    LineFramer framer("C[rank1]:D", "[rank1]:");
    std::string out;
    for (size_t i = 0; i < input.size(); i += chunk) {
      framer.frame(std::string_view(input).substr(i, chunk), out);
    }
    framer.finish(out);
    CHECK(out == expected);
  }
  LineFramer raw("", "");  // --no-prefix: nothing added, nothing skipped
  std::string out;
  raw.frame("[rank1]: a\n", out);
  CHECK(out == "[rank1]: a\n");
}

TEST_CASE(
    "line framer passes a line over 1 MiB on whole, as it comes, and cuts it only when told") {
  LineFramer framer("[r0]:", "[r0]:");
  std::string out;
  framer.frame(std::string(LineFramer::kMaxLineBytes - 1, 'a'), out);
  CHECK(out.empty());
  CHECK_FALSE(framer.line_open());
  framer.frame("bb", out);  // over 1 MiB: out now, the line stays open
  CHECK(framer.line_open());
  CHECK(out == "[r0]:" + std::string(LineFramer::kMaxLineBytes - 1, 'a') + "bb");
  out.clear();
  framer.frame("cc", out);  // the rest as it comes: no prefix, no newline added
  CHECK(out == "cc");
  out.clear();
  framer.frame("d\nnext\n", out);
  CHECK(out == "d\n[r0]:next\n");
  CHECK_FALSE(framer.line_open());
  CHECK(framer.cuts() == 0);
  // cut(): a newline now, and the bytes after it start a new (prefixed) line.
  out.clear();
  framer.frame(std::string(LineFramer::kMaxLineBytes, 'x'), out);
  CHECK(framer.line_open());
  CHECK(framer.cut(out) == 1);
  CHECK(framer.cuts() == 1);
  out.clear();
  framer.frame("y\n", out);
  CHECK(out == "[r0]:y\n");
  // finish() closes an open line with its newline.
  out.clear();
  framer.frame(std::string(LineFramer::kMaxLineBytes, 'z'), out);
  out.clear();
  CHECK(framer.finish(out) == 1);
  CHECK(out == "\n");
}

TEST_CASE("an error file's timestamp reads as ISO 8601 local time") {
  ::setenv("TZ", "UTC", 1);
  ::tzset();
  CHECK(format_error_time("1796454227") == "2026-12-05T07:03:47+0000");
  CHECK(format_error_time("yesterday") == "yesterday");
  CHECK(format_error_time("") == "");
  ::unsetenv("TZ");
  ::tzset();
}

TEST_CASE("/proc/<pid>/stat parsing copes with odd command names") {
  ProcStat st;
  REQUIRE(parse_proc_stat("1234 (my (odd) prog) S 77 1234 1234 0 -1", st));
  CHECK(st.pid == 1234);
  CHECK(st.state == 'S');
  CHECK(st.ppid == 77);
  CHECK(st.pgrp == 1234);
  CHECK(st.session == 1234);
  CHECK_FALSE(parse_proc_stat("garbage", st));
  CHECK_FALSE(parse_proc_stat("1 (short) S 1 1", st));
}

TEST_CASE("/proc/<pid>/stat: a command name that looks like the fields after it") {
  // The kernel writes comm as the process named itself (15 bytes, any of them): a name holding
  // ") Z 1 2 3" must not be read as a zombie whose parent is 1 (a parser taking the first ')'
  // or splitting at spaces would). The one reader ddprun keeps takes the last ')'.
  ProcStat st;
  REQUIRE(parse_proc_stat("42 (a) Z 1 2 3) R 7 8 9 0 -1 4194560\n", st));
  CHECK(st.pid == 42);
  CHECK(st.state == 'R');
  CHECK(st.ppid == 7);
  CHECK(st.pgrp == 8);
  CHECK(st.session == 9);
  REQUIRE(parse_proc_stat("5 (two words) Z 1 5 5 0", st));  // a zombie with a space in its name
  CHECK(st.state == 'Z');
  REQUIRE(parse_proc_stat("6 () S 1 6 6 0", st));  // an empty name
  CHECK(st.ppid == 1);
  CHECK_FALSE(parse_proc_stat("7 (no close S 1 7 7 0", st));
  CHECK_FALSE(parse_proc_stat("", st));
}

TEST_CASE("/proc/<pid>/stat: the start time (field 22) names one process; a short line has none") {
  // The status beacon tells a live ddprun from a reused pid by it: the same reader as supervision.
  ProcStat st;
  REQUIRE(
      parse_proc_stat("4242 (a) b) c) S 1 4242 4242 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 "
                      "987654 1000 10\n",
                      st));
  CHECK(st.state == 'S');
  REQUIRE(st.start_time.has_value());
  CHECK(*st.start_time == 987654ULL);
  REQUIRE(parse_proc_stat("1234 (x) S 77 1234 1234 0 -1", st));
  CHECK_FALSE(st.start_time.has_value());
  ProcStat self;
  REQUIRE(read_proc_stat(::getpid(), self));
  CHECK(self.start_time.value_or(0) > 0);
}

TEST_CASE("/proc/<pid>/stat: CPU time (fields 14 + 15) and RSS (field 24) for the views") {
  ProcStat st;
  // Fields 3.. : state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  // cutime cstime priority nice threads itrealvalue starttime vsize rss.
  REQUIRE(
      parse_proc_stat("9 (py thon) R 1 9 9 0 -1 0 10 0 0 0 250 50 7000 7000 20 0 3 0 "
                      "4242 100000 2560 18446744073709551615\n",
                      st));
  REQUIRE(st.cpu_ticks.has_value());
  CHECK(*st.cpu_ticks == 300ULL);  // its own time, not its children's (cutime, cstime)
  REQUIRE(st.rss_pages.has_value());
  CHECK(*st.rss_pages == 2560);
  CHECK(st.start_time.value_or(0) == 4242ULL);
  REQUIRE(parse_proc_stat("9 (x) R 1 9 9 0 -1 0 10 0 0 0 250", st));  // stops before stime
  CHECK_FALSE(st.cpu_ticks.has_value());
  CHECK_FALSE(st.rss_pages.has_value());
  ProcStat self;
  REQUIRE(read_proc_stat(::getpid(), self));
  CHECK(self.rss_pages.value_or(0) > 0);
  CHECK(self.cpu_ticks.has_value());
}

TEST_CASE("read_proc_stat reads a live process and says false for one that is gone") {
  ProcStat self;
  REQUIRE(read_proc_stat(::getpid(), self));
  CHECK(self.pid == ::getpid());
  CHECK(self.state == 'R');
  CHECK(self.ppid == ::getppid());
  CHECK(self.pgrp == ::getpgrp());
  CHECK(self.session == ::getsid(0));
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);  // reaped: its pid names nothing now
  ProcStat gone;
  CHECK_FALSE(read_proc_stat(child, gone));
}

TEST_CASE("host_name: gethostname's answer, never empty") {
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  CHECK(ddp::host_name() == (name[0] != '\0' ? std::string(name) : std::string("localhost")));
  CHECK_FALSE(ddp::host_name().empty());
}

TEST_CASE("error files in torch's @record format") {
  auto info = parse_error_file(R"({"message": {"message": "ValueError: boom", "extraInfo":
      {"py_callstack": "Traceback...\nValueError: boom", "timestamp": "1700000000"}}})");
  REQUIRE(info);
  CHECK(info->message == "ValueError: boom");
  CHECK(info->traceback.find("Traceback") == 0);
  CHECK(info->timestamp == "1700000000");
  auto plain = parse_error_file(R"({"message": "plain text"})");
  REQUIRE(plain);
  CHECK(plain->message == "plain text");
  CHECK_FALSE(parse_error_file("not json"));
  CHECK_FALSE(parse_error_file("{}"));
  std::string why;
  CHECK_FALSE(parse_error_file("not json", &why));
  CHECK(why == "not JSON");
  CHECK_FALSE(parse_error_file("{}", &why));
  CHECK(why == "no \"message\" in it");
}

TEST_CASE("error files: bad UTF-8 and lone surrogates become U+FFFD, the rest is kept") {
  const std::string fffd = "\xEF\xBF\xBD";
  // Python's json.dump of a surrogateescape'd name: a lone low surrogate escape.
  auto lone_low = parse_error_file(R"({"message": "cannot open shard_\udcff.bin"})");
  REQUIRE(lone_low);
  CHECK(lone_low->message == "cannot open shard_" + fffd + ".bin");
  auto lone_high = parse_error_file(R"({"message": "a\ud800\ud800b"})");
  REQUIRE(lone_high);
  CHECK(lone_high->message == "a" + fffd + fffd + "b");
  auto high_then_other = parse_error_file(R"({"message": "\ud800\u0041"})");
  REQUIRE(high_then_other);
  CHECK(high_then_other->message == fffd + "A");
  auto pair = parse_error_file(R"({"message": "\ud83d\ude00"})");
  REQUIRE(pair);
  CHECK(pair->message == "\xF0\x9F\x98\x80");
  // An escaped backslash followed by "ud800" is text, not an escape.
  CHECK(lenient_json_text(R"("\\ud800")") == R"("\\ud800")");
  CHECK(lenient_json_text(R"("\udcff")") == R"("\ufffd")");
  // Raw bytes: a stray 0xFF, an overlong C0 9B, an encoded surrogate ED A0 80, a multi-byte
  // sequence cut short at the end; well-formed C2 9B and E2 80 AE stay as they are.
  CHECK(lenient_json_text("a\xFF"
                          "b") == "a" + fffd + "b");
  CHECK(lenient_json_text("\xC0\x9B") == fffd + fffd);
  CHECK(lenient_json_text("\xE0\x82\x9B") == fffd + fffd + fffd);
  CHECK(lenient_json_text("\xED\xA0\x80") == fffd + fffd + fffd);
  CHECK(lenient_json_text("x\xE2\x80") == "x" + fffd + fffd);
  CHECK(lenient_json_text("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);
  CHECK(lenient_json_text("\xC2\x9B\xE2\x80\xAE\xF0\x9F\x98\x80") ==
        "\xC2\x9B\xE2\x80\xAE\xF0\x9F\x98\x80");
  auto raw = parse_error_file("{\"message\": \"bad \xFF name\xE2\x80\"}");
  REQUIRE(raw);
  CHECK(raw->message == "bad " + fffd + " name" + fffd + fffd);
  std::string why;
  CHECK_FALSE(parse_error_file("{\"message\": \"cut", &why));
  CHECK(why == "not JSON");
}

TEST_CASE("failure summary names the root cause and the ranks ddprun terminated") {
  RunSummaryInput in;
  in.program = "train.py";
  in.host = "node0";
  in.exit_code = 137;
  AttemptOutcome a;
  WorkerOutcome root;
  root.rank = 1;
  root.local_rank = 1;
  root.pid = 4242;
  root.status = ExitStatus::signaled(SIGKILL);
  root.oom_killed = true;
  root.stderr_tail = {"loading data", "allocating 80 GiB"};
  WorkerOutcome peer;
  peer.rank = 0;
  peer.pid = 4241;
  peer.status = ExitStatus::signaled(SIGTERM);
  peer.terminated_by_ddprun = true;
  a.workers = {peer, root};
  a.root_cause = 1;
  in.attempts = {a};
  std::string text = format_failure_summary(in);
  CHECK(text.find("rank       : 1 (local_rank: 1)") != std::string::npos);
  CHECK(text.find("pid        : 4242") != std::string::npos);
  CHECK(text.find("signal SIGKILL (9) - killed by the kernel's OOM killer") != std::string::npos);
  CHECK(text.find("host       : node0") != std::string::npos);
  CHECK(text.find("    allocating 80 GiB") != std::string::npos);
  CHECK(text.find("rank 0 (local_rank 0, pid 4241): signal SIGTERM (15)  [terminated by ddprun]") !=
        std::string::npos);
}

TEST_CASE("shell quoting for the dry run") {
  CHECK(shell_quote("plain-arg_1.py") == "plain-arg_1.py");
  CHECK(shell_quote("two words") == "'two words'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("") == "''");
}
