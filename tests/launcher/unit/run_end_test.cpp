// SPDX-License-Identifier: MIT
// RunEnd's rules: which cause of an attempt's end stands, its exit code and text, and which
// causes a restart can cure.
#include <doctest/doctest.h>
#include <signal.h>

#include "launcher/run/agent_events.hpp"
#include "launcher/run/run_end.hpp"
#include "rendezvous/json_text.hpp"

using namespace ddp::launcher;

namespace {

WorkerOutcome failed_worker(int rank, ExitStatus status) {
  WorkerOutcome w;
  w.rank = rank;
  w.pid = 42;
  w.status = status;
  return w;
}

RunEnd local_failure() { return worker_failed(failed_worker(3, ExitStatus::exited(5)), 1, "b"); }
RunEnd other_stop() {
  return job_stopped(StopReason{9, 0, "node 0 (a): rank 0 (pid 1) failed with exit code 9", {}});
}
RunEnd loss() { return node_lost(NodeLoss{"lost node 2 (c): no heartbeat for 5 s", 2}); }

}  // namespace

TEST_CASE("each cause carries its exit code, text and node") {
  CHECK(local_failure().exit_code == 5);
  CHECK(local_failure().node_rank == 1);
  CHECK(local_failure().text == "node 1 (b): rank 3 (pid 42) failed with exit code 5");
  RunEnd single = worker_failed(failed_worker(0, ExitStatus::signaled(SIGSEGV)), -1, "a");
  CHECK(single.exit_code == 128 + SIGSEGV);
  CHECK(single.text.rfind("rank 0 failed with", 0) == 0);
  CHECK(other_stop().exit_code == 9);
  CHECK(other_stop().node_rank == 0);
  CHECK(loss().exit_code == 74);
  CHECK(loss().node_rank == 2);
  CHECK(node_lost(NodeLoss{"lost the store", std::nullopt}).node_rank == -1);
  CHECK(rendezvous_failed("timeout").exit_code == 69);
  CHECK(interrupted(SIGTERM).exit_code == 128 + SIGTERM);
  CHECK(interrupted(SIGTERM).signal == SIGTERM);
  CHECK(internal_error(70, "pipe: EMFILE").exit_code == 70);
}

TEST_CASE("the first cause stands unless a rule says otherwise") {
  std::optional<RunEnd> end;
  CHECK(offer(end, local_failure()));
  CHECK_FALSE(offer(end, loss()));
  CHECK_FALSE(offer(end, rendezvous_failed("x")));
  CHECK_FALSE(offer(end, worker_failed(failed_worker(4, ExitStatus::exited(6)), 1, "b")));
  CHECK(end->exit_code == 5);

  std::optional<RunEnd> lost;
  CHECK(offer(lost, loss()));
  CHECK_FALSE(offer(lost, local_failure()));
  CHECK(lost->kind == RunEndKind::NodeLost);
}

TEST_CASE("the store's stop reason replaces this node's own failure and a lost node") {
  std::optional<RunEnd> end = local_failure();
  CHECK(offer(end, other_stop()));
  CHECK(end->exit_code == 9);
  // ... but not a stop that came first.
  CHECK_FALSE(offer(end, job_stopped(StopReason{4, 2, "node 2 ...", {}})));
  CHECK(end->exit_code == 9);

  std::optional<RunEnd> lost = loss();
  CHECK(offer(lost, other_stop()));
  CHECK(lost->kind == RunEndKind::JobStopped);
}

TEST_CASE("a signal replaces any cause but an internal error; an internal error replaces all") {
  for (RunEnd first : {local_failure(), other_stop(), loss(), rendezvous_failed("x")}) {
    std::optional<RunEnd> end = first;
    CHECK(offer(end, interrupted(SIGINT)));
    CHECK(end->exit_code == 130);
    CHECK_FALSE(offer(end, other_stop()));
    CHECK_FALSE(offer(end, interrupted(SIGTERM)));  // the first signal is the one reported
    CHECK(offer(end, internal_error(70, "fork")));
    CHECK(end->exit_code == 70);
    CHECK_FALSE(offer(end, interrupted(SIGINT)));
    CHECK_FALSE(offer(end, internal_error(71, "other")));
    CHECK(end->exit_code == 70);
  }
}

TEST_CASE("only worker failures (here or elsewhere) are worth a restart") {
  CHECK(restartable(local_failure()));
  CHECK(restartable(other_stop()));
  CHECK_FALSE(restartable(loss()));
  CHECK_FALSE(restartable(rendezvous_failed("x")));
  CHECK_FALSE(restartable(interrupted(SIGTERM)));
  CHECK_FALSE(restartable(internal_error(70, "x")));
}

TEST_CASE("a stop is this node's own by node rank, never by its words") {
  CHECK(is_own_stop(StopReason{1, 2, "anything", {}}, 2));
  CHECK_FALSE(is_own_stop(StopReason{1, 1, "anything", {}}, 2));
  CHECK_FALSE(is_own_stop(StopReason{1, -1, "node 2 ...", {}}, 2));  // unknown node: not ours
}

TEST_CASE("a hang verdict ends with 75 and names the node as a worker failure does") {
  RunEnd single = hung("hung: no progress (output) for 5.0 s", -1, "a");
  CHECK(single.kind == RunEndKind::Hung);
  CHECK(single.exit_code == 75);
  CHECK(single.text == "hung: no progress (output) for 5.0 s");
  CHECK(single.node_rank == -1);
  RunEnd multi = hung("hung: no progress (heartbeat) for 5.0 s", 1, "b");
  CHECK(multi.text == "node 1 (b): hung: no progress (heartbeat) for 5.0 s");
  CHECK(multi.node_rank == 1);
  CHECK_FALSE(multi.from_store);
  CHECK(std::string(kind_name(RunEndKind::Hung)) == "hung");
}

TEST_CASE("a hang verdict is this node's own cause: first stands, the store's stop replaces it") {
  std::optional<RunEnd> end;
  CHECK(offer(end, hung("hung: x", 1, "b")));
  // The workers it stops then fail, and a lost node may follow: the verdict stands.
  CHECK_FALSE(offer(end, local_failure()));
  CHECK_FALSE(offer(end, loss()));
  CHECK(end->exit_code == 75);
  // Another node's stop came first in the store: every node reports that one.
  CHECK(offer(end, other_stop()));
  CHECK(end->kind == RunEndKind::JobStopped);
  CHECK(end->exit_code == 9);

  // A worker that failed before the verdict stays the cause.
  std::optional<RunEnd> failed = local_failure();
  CHECK_FALSE(offer(failed, hung("hung: x", 1, "b")));
  CHECK(failed->kind == RunEndKind::WorkerFailed);

  // A signal and an internal error replace a hang verdict.
  std::optional<RunEnd> signaled = hung("hung: x", -1, "a");
  CHECK(offer(signaled, interrupted(SIGTERM)));
  CHECK(signaled->exit_code == 128 + SIGTERM);
  std::optional<RunEnd> internal = hung("hung: x", -1, "a");
  CHECK(offer(internal, internal_error(70, "fork")));
  CHECK(internal->exit_code == 70);
}

TEST_CASE("a hang, here or broadcast by another node (exit 75), is worth a restart") {
  CHECK(restartable(hung("hung: x", -1, "a")));
  RunEnd elsewhere = job_stopped(StopReason{75, 0, "node 0 (a): hung: x", {}});
  CHECK(elsewhere.kind == RunEndKind::JobStopped);
  CHECK(elsewhere.exit_code == 75);
  CHECK(restartable(elsewhere));
}

TEST_CASE("what follows an attempt: a held failure, quarantine, re-form, restart, the end") {
  const std::optional<RunEnd> failed = local_failure();
  const std::optional<RunEnd> none;
  const std::optional<RunEnd> reform = rescale("lost node 1 (b); re-forming", {0, 2}, 0);
  const std::optional<RunEnd> lost = loss();
  AttemptFlags flags{false, false, false, 0, 3};
  CHECK(next_step(failed, flags) == NextStep::Restart);
  CHECK(next_step(none, flags) == NextStep::Finish);  // success
  CHECK(next_step(reform, flags) == NextStep::Reform);
  CHECK(next_step(lost, flags) == NextStep::Finish);  // a loss no re-form covers ends the run
  // The restart budget: the last restart is taken, then the failure ends the run.
  flags.restarts_used = 2;
  CHECK(next_step(failed, flags) == NextStep::Restart);
  flags.restarts_used = 3;
  CHECK(next_step(failed, flags) == NextStep::Finish);
  CHECK(next_step(reform, flags) == NextStep::Reform);  // re-forms do not spend restarts
  // Interrupted: neither a restart nor a re-form.
  flags = AttemptFlags{false, false, true, 0, 3};
  CHECK(next_step(failed, flags) == NextStep::Finish);
  CHECK(next_step(reform, flags) == NextStep::Finish);
  // A quarantined node leaves whatever else holds; a held failure waits before anything.
  flags = AttemptFlags{false, true, false, 0, 3};
  CHECK(next_step(failed, flags) == NextStep::Leave);
  flags.failure_held = true;
  CHECK(next_step(failed, flags) == NextStep::AwaitVerdict);
  CHECK(next_step(none, AttemptFlags{true, false, true, 9, 0}) == NextStep::AwaitVerdict);
}

TEST_CASE(
    "the summary event: each attempt's cause, and tracebacks bounded (the root cause's kept)") {
  auto worker = [](int rank, const std::string& traceback, bool stopped) {
    WorkerOutcome w;
    w.rank = rank;
    w.local_rank = rank;
    w.status = stopped ? ExitStatus::signaled(SIGTERM) : ExitStatus::exited(1);
    w.terminated_by_ddprun = stopped;
    if (!traceback.empty()) w.error_info = ErrorFileInfo{"RuntimeError: peer gone", traceback, "1"};
    return w;
  };
  // A collective error raised on 200 ranks, each with a 20 KiB traceback; rank 150 is the cause.
  AttemptOutcome a;
  a.attempt = 0;
  for (int r = 0; r < 200; ++r)
    a.workers.push_back(worker(r, std::string(20000, 'x') + "frame " + std::to_string(r), false));
  a.root_cause = 150;
  a.cause = "rank 150 failed with exit code 1";
  AttemptOutcome ok;
  ok.attempt = 1;
  ok.workers.push_back(worker(0, "", true));
  const auto j = summary_fields(1, {a, ok}, std::nullopt, "");
  const auto& first = j["attempts"][0];
  CHECK(first["cause"] == "rank 150 failed with exit code 1");
  CHECK(first["root_cause_rank"] == 150);
  CHECK_FALSE(j["attempts"][1].contains("cause"));
  size_t total = 0, with = 0;
  for (const auto& w : first["workers"]) {
    if (!w.contains("error_traceback")) continue;
    ++with;
    const std::string tb = w["error_traceback"];
    CHECK(tb.size() == 16384);  // the end kept: the raising frame
    CHECK(tb.find("frame " + std::to_string(w["rank"].get<int>())) != std::string::npos);
    total += tb.size();
  }
  CHECK(first["workers"][150].contains("error_traceback"));  // past the others' room
  CHECK(with < 200);
  CHECK(total <= (1u << 20) + 16384);
  CHECK(first["workers"][199]["error_message"] == "RuntimeError: peer gone");
}

TEST_CASE("the summary event stays one line a reader takes whole: a huge message every attempt") {
  // Breaker of 2026-12-07: rank 0 failed 19 attempts with a 0.95 MB message each; the summary
  // line was 18 MB and `ddprun report` refused ddprun's own file (lines over 16 MiB).
  std::vector<AttemptOutcome> attempts;
  for (int k = 0; k < 19; ++k) {
    AttemptOutcome a;
    a.attempt = k;
    WorkerOutcome w;
    w.rank = 0;
    w.status = ExitStatus::exited(1);
    std::string csi;  // U+009B (CSI) over and over: JSON writes each as six bytes
    for (int i = 0; i < 475000; ++i) csi += "\xc2\x9b";
    w.error_info = ErrorFileInfo{csi + "attempt " + std::to_string(k),
                                 std::string(20000, 't') + "frame " + std::to_string(k), "1"};
    a.workers.push_back(w);
    a.root_cause = 0;
    a.cause = "rank 0 failed with exit code 1";
    attempts.push_back(a);
  }
  const auto j = summary_fields(1, attempts, std::nullopt, "");
  const std::string line = ddp::dump_json(j);  // as the events file writes it
  CHECK(line.size() < (16u << 20));
  const auto& last = j["attempts"][18]["workers"][0];
  REQUIRE(last.contains("error_message"));  // the job's root cause, kept
  CHECK(last["error_message"].get<std::string>().size() == 16384 + 6);  // cut, and says so
  CHECK(last["error_traceback"].get<std::string>().find("frame 18") != std::string::npos);
  CHECK(j["attempts"][0]["workers"][0].contains("error_message"));  // the first ones too
}
