// SPDX-License-Identifier: MIT
// JobCgroup with real processes, where cgroup v2 is writable (else the cases say why and pass):
// a worker started either way (clone3 into the cgroup, or fork + moving itself in, the fallback
// for kernels or seccomp filters that refuse clone3) is in the cgroup, and cgroup.kill ends it.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
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
  const std::string where = cgroup_of(started->pid);
  CHECK(where.size() >= name.size());
  CHECK(where.compare(where.size() - name.size(), name.size(), name) == 0);
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
