// SPDX-License-Identifier: MIT
// JobCgroup with real processes, where cgroup v2 is writable (else the cases say why and pass):
// a worker started either way (clone3 into the cgroup, or fork + moving itself in, the fallback
// for kernels or seccomp filters that refuse clone3) is in the cgroup, and cgroup.kill ends it;
// every attempt starts in a fresh cgroup; cgroups made inside go with it.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "launcher/process/job_cgroup.hpp"
#include "launcher/process/spawn.hpp"

using namespace ddp::launcher;

namespace {

std::string cgroup_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line, v2;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) v2 = line.substr(3);
  }
  return v2;
}

void check_started_in_cgroup(bool use_clone3) {
  auto made = JobCgroup::create();
  if (auto* why = std::get_if<std::string>(&made)) {
    MESSAGE("no job cgroup here: " << *why);
    return;
  }
  auto& cgroup = *std::get<std::unique_ptr<JobCgroup>>(made);
  SpawnRequest request{"/bin/sleep", {"sleep", "30"}, {}, -1, -1};
  request.cgroup_dir_fd = use_clone3 ? cgroup.dir_fd() : -1;
  request.cgroup_procs_fd = cgroup.procs_fd();
  auto started = start_process(request);
  REQUIRE(started);
  REQUIRE(await_exec(*started, "/bin/sleep"));
  const std::string name = cgroup.path().substr(cgroup.path().rfind('/'));
  CHECK(cgroup_of(started->pid).find(name + "/attempt-") != std::string::npos);
  CHECK(cgroup.contains(started->pid));
  CHECK(cgroup.members() == std::vector<pid_t>{started->pid});
  CHECK(cgroup.kill_all());
  int status = 0;
  REQUIRE(::waitpid(started->pid, &status, 0) == started->pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

}  // namespace

TEST_CASE("a worker born in the job cgroup (clone3) is killed by cgroup.kill") {
  check_started_in_cgroup(true);
}

TEST_CASE(
    "a worker that moves itself into the job cgroup (fork fallback) is killed by cgroup.kill") {
  check_started_in_cgroup(false);
}

namespace {

pid_t start_sleeper(JobCgroup& cgroup) {
  SpawnRequest request{"/bin/sleep", {"sleep", "30"}, {}, -1, -1};
  request.cgroup_dir_fd = cgroup.dir_fd();
  request.cgroup_procs_fd = cgroup.procs_fd();
  auto started = start_process(request);
  REQUIRE(started);
  REQUIRE(await_exec(*started, "/bin/sleep"));
  return started->pid;
}

int wait_status(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

std::unique_ptr<JobCgroup> make_cgroup() {
  auto made = JobCgroup::create();
  if (auto* why = std::get_if<std::string>(&made)) {
    MESSAGE("no job cgroup here: " << *why);
    return nullptr;
  }
  return std::move(std::get<std::unique_ptr<JobCgroup>>(made));
}

}  // namespace

TEST_CASE("after cgroup.kill, the next attempt's workers are born alive (issue 23, item 1)") {
  // Since Linux 6.14 clone3(CLONE_INTO_CGROUP) into a cgroup that has seen cgroup.kill SIGKILLs
  // the child at birth; every attempt gets a cgroup of its own.
  auto cgroup = make_cgroup();
  if (!cgroup) return;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const pid_t pid = start_sleeper(*cgroup);
    ::usleep(50'000);
    CHECK(cgroup->members() == std::vector<pid_t>{pid});  // alive, not killed at birth
    CHECK(cgroup->contains(pid));
    CHECK(cgroup->kill_all());
    const int status = wait_status(pid);
    CHECK(WIFSIGNALED(status));
    cgroup->next_attempt();
  }
}

TEST_CASE("cgroups a worker makes inside the job cgroup are seen and removed (issue 23, item 3)") {
  auto cgroup = make_cgroup();
  if (!cgroup) return;
  const pid_t pid = start_sleeper(*cgroup);
  const std::string cgroup_of_pid = [&] {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("0::", 0) == 0) return line.substr(3);
    }
    return std::string();
  }();
  // The worker's own cgroup, then two levels inside it, the sleeper moved to the deepest.
  const std::string own = cgroup->path() + cgroup_of_pid.substr(cgroup_of_pid.rfind('/'));
  const std::string deep = own + "/nested/deeper";
  REQUIRE(std::filesystem::create_directories(deep));
  std::ofstream(deep + "/cgroup.procs") << pid;
  CHECK(cgroup->members() == std::vector<pid_t>{pid});
  CHECK(cgroup->contains(pid));
  const std::string path = cgroup->path();
  cgroup.reset();  // kills and removes the whole tree
  CHECK(WIFSIGNALED(wait_status(pid)));
  CHECK_FALSE(std::filesystem::exists(path));
}
