// The I/O half of master resolution, against real programs: the resolver, and fake `scontrol`
// scripts (a real process that prints, fails or hangs), since no Slurm runs in unit tests.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "launcher/scheduler/resolve_master.hpp"
#include "launcher/scheduler/run_command.hpp"
#include "launcher/scheduler/slurm_node_addr.hpp"

using namespace ddp::launcher::scheduler;
using namespace std::chrono_literals;

namespace {
// A temporary executable script, removed at the end of the test.
struct ScriptFile {
  std::filesystem::path path;
  explicit ScriptFile(const std::string& body) {
    char dir[] = "/tmp/ddp-scheduler-test.XXXXXX";
    path = std::filesystem::path(mkdtemp(dir)) / "scontrol";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    chmod(path.c_str(), 0755);
  }
  ~ScriptFile() { std::filesystem::remove_all(path.parent_path()); }
};
}  // namespace

TEST_CASE("scontrol output: NodeAddr is parsed, absent or (null) gives nothing") {
  const char* line =
      "NodeName=n2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=4 NodeAddr=127.0.0.1 "
      "NodeHostName=vm Version=22.05.8 OS=Linux 6.1 RealMemory=1000 State=IDLE";
  CHECK(parse_scontrol_node_addr(line) == "127.0.0.1");
  CHECK(parse_scontrol_node_addr("NodeName=a\n   NodeAddr=a-ib NodeHostName=a\n") == "a-ib");
  CHECK_FALSE(parse_scontrol_node_addr("Node n9 not found"));
  CHECK_FALSE(parse_scontrol_node_addr("NodeName=a NodeAddr= X=1"));
  CHECK_FALSE(parse_scontrol_node_addr("XNodeAddr=1.2.3.4"));
}

TEST_CASE("dns: numeric and local names resolve, an invalid name does not") {
  CHECK(resolve_dns("127.0.0.1", 2s) == "127.0.0.1");
  CHECK(resolve_dns("localhost", 2s) == "127.0.0.1");
  CHECK_FALSE(resolve_dns("no-such-host.invalid", 5s));
  CHECK_FALSE(resolve_dns("", 1s));
}

TEST_CASE("run_command: output, exit code, missing program, and the deadline") {
  auto ok = run_command({"sh", "-c", "echo out; echo err >&2; exit 3"}, 5s);
  CHECK(ok.exit_code == 3);
  CHECK(ok.output == "out\nerr\n");
  CHECK_FALSE(ok.timed_out);
  auto missing = run_command({"/nonexistent/scontrol"}, 1s);
  CHECK(missing.exit_code != 0);
  auto start = std::chrono::steady_clock::now();
  auto hung = run_command({"sleep", "30"}, 300ms);
  CHECK(hung.timed_out);
  CHECK(hung.exit_code == 128 + 9);
  CHECK(std::chrono::steady_clock::now() - start < 10s);  // bounded, not a speed assertion
  auto quiet = run_command({"sh", "-c", "exec >/dev/null 2>&1; sleep 30; true"}, 300ms);
  CHECK(quiet.timed_out);
}

TEST_CASE("resolve_master_host: DNS first, then Slurm's NodeAddr, errors name the host") {
  ResolveOptions options;
  options.timeout = 5s;
  auto dns = resolve_master_host("localhost", options);
  CHECK(dns.address == "127.0.0.1");
  CHECK(dns.how == "DNS");

  ScriptFile fake(
      "[ \"$4\" = n1.invalid ] && echo 'NodeName=n1.invalid NodeAddr=127.0.0.1 "
      "NodeHostName=vm' && exit 0; echo 'Node not found'; exit 1");
  options.scontrol = fake.path.string();
  auto slurm = resolve_master_host("n1.invalid", options);
  CHECK(slurm.address == "127.0.0.1");
  CHECK(slurm.how.find("Slurm NodeAddr") == 0);
  CHECK_THROWS_WITH_AS(resolve_master_host("n9.invalid", options),
                       doctest::Contains("'n9.invalid' does not resolve"), SchedulerError);
  options.ask_slurm = false;
  CHECK_THROWS_AS(resolve_master_host("n1.invalid", options), SchedulerError);
}

TEST_CASE("resolve_master_host: a hanging scontrol is cut at the deadline") {
  ScriptFile hang("sleep 30");
  ResolveOptions options;
  options.timeout = 300ms;
  options.scontrol = hang.path.string();
  CHECK_THROWS_WITH_AS(resolve_master_host("n1.invalid", options),
                       doctest::Contains("did not answer within 300 ms"), SchedulerError);
}
