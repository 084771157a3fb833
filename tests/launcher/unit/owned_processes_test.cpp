// SPDX-License-Identifier: MIT
// WorkerPidfds with real processes: what a reaped worker left in its group is reached through the
// worker's pidfd (not through its number, which may belong to anyone by then), and the pidfd is
// let go once the worker and its whole group are gone.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher/process/owned_processes.hpp"

using namespace ddp::launcher;

namespace {

/// A "worker" that leads its own group (setsid) and leaves a child in it, then exits.
/// Returns the worker's pid; `left` gets the child's.
pid_t worker_leaving_a_child(pid_t& left) {
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t worker = ::fork();
  if (worker == 0) {
    ::setsid();
    const pid_t child = ::fork();
    if (child == 0) {
      ::execl("/bin/sleep", "sleep", "30", nullptr);
      ::_exit(127);
    }
    ssize_t ignored = ::write(report[1], &child, sizeof child);
    (void)ignored;
    ::_exit(0);
  }
  ::close(report[1]);
  REQUIRE(::read(report[0], &left, sizeof left) == sizeof left);
  ::close(report[0]);
  return worker;
}

}  // namespace

TEST_CASE("a reaped worker's group is signalled through its pidfd, then let go") {
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);  // the orphan comes back here, as to ddprun
  WorkerPidfds workers;
  pid_t left = 0;
  const pid_t worker = worker_leaving_a_child(left);
  if (workers.add(worker) < 0) {
    MESSAGE("no pidfd_open in this kernel; skipped");
    return;
  }
  int status = 0;
  REQUIRE(::waitpid(worker, &status, 0) == worker);
  workers.reaped(worker);
  CHECK(workers.owns_group(worker));  // the child is still in it
  workers.prune();
  CHECK(workers.fd_of(worker) >= 0);  // kept: the group has a member
  workers.signal_group(worker, SIGKILL);
  REQUIRE(::waitpid(left, &status, 0) == left);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK_FALSE(workers.owns_group(worker));
  workers.prune();
  CHECK(workers.fd_of(worker) == -1);  // gone with its whole group
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_CASE("a live worker is signalled even before its setsid() (its group does not exist yet)") {
  WorkerPidfds workers;
  // The child must die of the SIGTERM, not run the test runner's handler for it.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &term, &old);
  const pid_t worker = ::fork();
  if (worker == 0) {  // never leads a group
    ::signal(SIGTERM, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    ::execl("/bin/sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  if (workers.add(worker) < 0) {
    ::kill(worker, SIGKILL);
    ::waitpid(worker, nullptr, 0);
    return;
  }
  workers.signal_worker(worker, SIGTERM);
  int status = 0;
  REQUIRE(::waitpid(worker, &status, 0) == worker);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
}
