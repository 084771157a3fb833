// SPDX-License-Identifier: MIT
// Progress, the hang verdict, stragglers and no-progress restarts against a fake clock.
#include <doctest/doctest.h>

#include "launcher/health/hang_verdict.hpp"
#include "launcher/health/no_progress_restarts.hpp"
#include "launcher/health/progress_tracker.hpp"
#include "launcher/health/straggler_detector.hpp"

using namespace ddp::launcher::health;
using namespace std::chrono_literals;

namespace {
const Clock::time_point t0 = Clock::time_point{} + 1000s;
}

TEST_CASE("nothing but the start: hung exactly at the timeout, every rank a suspect") {
  ProgressTracker p;
  p.start_attempt({0, 1, 2}, t0);
  CHECK_FALSE(judge_hang(p, {5s, 0s}, t0 + 4999ms));
  auto v = judge_hang(p, {5s, 0s}, t0 + 5s);
  REQUIRE(v);
  CHECK(v->idle == 5s);
  CHECK(v->oldest_first.size() == 3);
  CHECK(next_hang_check(p, {5s, 0s}) == t0 + 5s);
}

TEST_CASE("the startup timeout applies until every rank's first progress") {
  ProgressTracker p;
  p.start_attempt({0, 1}, t0);
  const HangTimeouts t{5s, 60s};
  CHECK_FALSE(judge_hang(p, t, t0 + 59s));
  CHECK(next_hang_check(p, t) == t0 + 60s);
  CHECK(judge_hang(p, t, t0 + 60s));
  p.record(1, ProgressSource::Output, t0 + 10s);
  p.record(0, ProgressSource::Output, t0 + 10s);
  CHECK(p.job_started());
  CHECK(next_hang_check(p, t) == t0 + 15s);
  CHECK(judge_hang(p, t, t0 + 15s));
  // A steady timeout longer than the startup one wins.
  ProgressTracker q;
  q.start_attempt({0}, t0);
  CHECK_FALSE(judge_hang(q, {90s, 60s}, t0 + 80s));
}

TEST_CASE("one progressing rank keeps the job alive; the stuck one is named first") {
  ProgressTracker p;
  p.start_attempt({4, 5}, t0);
  for (int i = 1; i <= 10; ++i) p.record(0, ProgressSource::Output, t0 + i * 1s);
  CHECK_FALSE(judge_hang(p, {5s, 0s}, t0 + 12s));
  auto v = judge_hang(p, {5s, 0s}, t0 + 15s);
  REQUIRE(v);
  CHECK(v->oldest_first == std::vector<size_t>{1, 0});
  CHECK(p.ranks()[v->oldest_first[0]].rank == 5);
}

TEST_CASE("once heartbeats come, output lines no longer count as progress") {
  ProgressTracker p;
  p.start_attempt({0}, t0);
  p.record(0, ProgressSource::Output, t0 + 1s);
  CHECK(p.active_source() == ProgressSource::Output);
  p.record(0, ProgressSource::Heartbeat, t0 + 2s, 1);
  CHECK(p.active_source() == ProgressSource::Heartbeat);
  // A logging thread runs on while the training loop is stuck.
  for (int i = 3; i < 30; ++i) p.record(0, ProgressSource::Output, t0 + i * 1s);
  CHECK(p.last_progress(0) == t0 + 2s);
  CHECK(judge_hang(p, {10s, 0s}, t0 + 12s));
}

TEST_CASE("timer requests count only while there is nothing better") {
  ProgressTracker p;
  p.start_attempt({0}, t0);
  p.record(0, ProgressSource::Timer, t0 + 3s);
  CHECK(p.last_progress(0) == t0 + 3s);
  p.record(0, ProgressSource::Output, t0 + 4s);
  p.record(0, ProgressSource::Timer, t0 + 8s);
  CHECK(p.last_progress(0) == t0 + 4s);
}

TEST_CASE("a slow but steady heartbeat is never hung") {
  ProgressTracker p;
  p.start_attempt({0, 1}, t0);
  for (int i = 1; i <= 100; ++i) {
    p.record(0, ProgressSource::Heartbeat, t0 + i * 4s, i);
    p.record(1, ProgressSource::Heartbeat, t0 + i * 4s + 1s, i);
    CHECK_FALSE(judge_hang(p, {5s, 0s}, t0 + i * 4s + 3s));
  }
  CHECK(p.best_step() == 100);
}

TEST_CASE("an exit counts as progress, and the dead are not suspects") {
  ProgressTracker p;
  p.start_attempt({0, 1}, t0);
  p.record_exit(0, t0 + 4s);
  CHECK_FALSE(judge_hang(p, {5s, 0s}, t0 + 8s));
  auto v = judge_hang(p, {5s, 0s}, t0 + 9s);
  REQUIRE(v);
  CHECK(v->oldest_first == std::vector<size_t>{1});
  p.record_exit(1, t0 + 10s);
  CHECK_FALSE(judge_hang(p, {5s, 0s}, t0 + 100s));  // nobody alive: nothing to judge
}

TEST_CASE("a new attempt forgets the old one") {
  ProgressTracker p;
  p.start_attempt({0}, t0);
  p.record(0, ProgressSource::Heartbeat, t0 + 1s, 50);
  p.start_attempt({0}, t0 + 10s);
  CHECK_FALSE(p.active_source());
  CHECK_FALSE(p.best_step());
  CHECK(p.last_progress(0) == t0 + 10s);
}

TEST_CASE("straggler: below the ratio of the median for a full window, reported once") {
  StragglerDetector d(0.5, 60s);
  std::vector<std::optional<long long>> steps(4);
  std::vector<Straggler> found;
  for (int s = 0; s <= 120; s += 5) {
    for (int r = 0; r < 3; ++r) steps[r] = 10LL * s;  // 10 steps/s
    steps[3] = 4LL * s;                               // 4 steps/s < 0.5 * 10
    auto now = t0 + s * 1s;
    auto f = d.evaluate(steps, now);
    if (s < 60) CHECK(f.empty());  // no full window yet
    found.insert(found.end(), f.begin(), f.end());
  }
  REQUIRE(found.size() == 1);
  CHECK(found[0].local_rank == 3);
  CHECK(found[0].rate == doctest::Approx(4.0));
  CHECK(found[0].median_rate == doctest::Approx(10.0));
}

TEST_CASE("straggler: a rank at 60% of the median is not one; no steps, no verdict") {
  StragglerDetector d(0.5, 60s);
  std::vector<std::optional<long long>> steps(3);
  for (int s = 0; s <= 180; s += 5) {
    steps[0] = 10LL * s;
    steps[1] = 10LL * s;
    steps[2] = 6LL * s;
    CHECK(d.evaluate(steps, t0 + s * 1s).empty());
  }
  StragglerDetector none(0.5, 60s);
  std::vector<std::optional<long long>> nothing(3);
  for (int s = 0; s <= 180; s += 5) CHECK(none.evaluate(nothing, t0 + s * 1s).empty());
}

TEST_CASE("straggler: reported again after it recovered and fell behind again") {
  StragglerDetector d(0.5, 10s);
  std::vector<std::optional<long long>> steps(2);
  long long a = 0, b = 0;
  int reports = 0;
  for (int s = 0; s <= 200; ++s) {
    a += 10;
    b += (s < 60 || s > 130) ? 1 : 10;
    steps[0] = a;
    steps[1] = b;
    reports += static_cast<int>(d.evaluate(steps, t0 + s * 1s).size());
  }
  CHECK(reports == 2);
}

TEST_CASE("no-progress restarts: K restarts in a row without a new best step end the job") {
  NoProgressRestarts policy(2);
  CHECK_FALSE(policy.attempt_failed(7));  // attempt 0 reached step 7
  CHECK_FALSE(policy.attempt_failed(7));  // restart 1: nothing new
  CHECK(policy.in_a_row() == 1);
  CHECK(policy.attempt_failed(5));  // restart 2: nothing new -> stop
  CHECK(policy.job_best() == 7);
}

TEST_CASE("no-progress restarts: progress resets the count; no steps never stop") {
  NoProgressRestarts policy(2);
  CHECK_FALSE(policy.attempt_failed(7));
  CHECK_FALSE(policy.attempt_failed(std::nullopt));  // no step at all: no progress
  CHECK_FALSE(policy.attempt_failed(9));             // a new best
  CHECK(policy.in_a_row() == 0);
  NoProgressRestarts silent(1);
  for (int i = 0; i < 10; ++i) CHECK_FALSE(silent.attempt_failed(std::nullopt));
  NoProgressRestarts off(0);
  for (int i = 0; i < 10; ++i) CHECK_FALSE(off.attempt_failed(3));
}

TEST_CASE("multi-node: progress on another node keeps a silent node from a verdict") {
  // Node 1's ranks print nothing (only rank 0 logs, on node 0); node 0's counter keeps changing.
  ProgressTracker p;
  p.start_attempt({2, 3}, t0);
  const HangTimeouts t{5s, 5s};
  for (int i = 1; i <= 30; ++i) {
    p.record_elsewhere(t0 + i * 1s, std::nullopt);
    CHECK_FALSE(judge_hang(p, t, t0 + i * 1s + 900ms));
  }
  CHECK(p.job_progressed());
  CHECK_FALSE(p.active_source());  // nothing here, ever
  // The whole job stops: hung exactly the timeout after the last progress noticed anywhere.
  CHECK(next_hang_check(p, t) == t0 + 35s);
  CHECK_FALSE(judge_hang(p, t, t0 + 34999ms));
  auto v = judge_hang(p, t, t0 + 35s);
  REQUIRE(v);
  CHECK(v->idle == 5s);
  CHECK(v->oldest_first == std::vector<size_t>{0, 1});  // the suspects are local ranks
}

TEST_CASE("multi-node: once all started, progress elsewhere and local progress both count") {
  ProgressTracker p;
  p.start_attempt({0}, t0, /*other_nodes=*/true);
  const HangTimeouts t{5s, 60s};
  CHECK(next_hang_check(p, t) == t0 + 60s);
  p.record(0, ProgressSource::Output, t0 + 1s);
  CHECK(next_hang_check(p, t) == t0 + 60s);  // the other node's ranks have not started
  p.record_elsewhere(t0 + 2s, std::nullopt, /*others_started=*/true);
  CHECK(next_hang_check(p, t) == t0 + 7s);  // the job progressed: --hang-timeout applies
  p.record(0, ProgressSource::Heartbeat, t0 + 6s, 3);
  CHECK(next_hang_check(p, t) == t0 + 11s);  // the later of the two
  CHECK_FALSE(judge_hang(p, t, t0 + 10s));
  CHECK(judge_hang(p, t, t0 + 11s));
}

TEST_CASE("multi-node: the job's best step includes the other nodes'; a new attempt forgets it") {
  ProgressTracker p;
  p.start_attempt({0}, t0);
  p.record(0, ProgressSource::Heartbeat, t0 + 1s, 4);
  p.record_elsewhere(t0 + 2s, 9);
  p.record_elsewhere(t0 + 3s, 7);  // another node behind: the best stays
  CHECK(p.best_step() == 4);
  CHECK(p.job_best_step() == 9);
  p.start_attempt({0}, t0 + 10s);
  CHECK_FALSE(p.job_best_step());
  CHECK_FALSE(p.job_progressed());
  CHECK_FALSE(p.last_progress_elsewhere());
  // No-progress restarts decide on the job's best: a node without steps follows the others.
  NoProgressRestarts policy(1);
  CHECK_FALSE(policy.attempt_failed(p.job_best_step()));
  p.record_elsewhere(t0 + 11s, 12);
  CHECK_FALSE(policy.attempt_failed(p.job_best_step()));  // 12: a new best somewhere
  CHECK(policy.attempt_failed(p.job_best_step()));        // still 12: did not help
}

// docs/reliability.md "Zygote faults": ranks that start at very different speeds. Before the
// fix the startup timeout ended at the attempt's first progress anywhere: (a), (b) and (c) fail
// on that rule (a verdict at t0 + 21 s / 22 s); (d) passes on both (the steady rule is unchanged).
TEST_CASE("startup: a slow rank keeps the startup timeout until its first progress (a)") {
  ProgressTracker p;
  p.start_attempt({0, 1}, t0);
  const HangTimeouts t{20s, 60s};
  p.record(0, ProgressSource::Output, t0 + 1s);  // then blocks in a collective, waiting for 1
  CHECK_FALSE(p.job_started());
  CHECK(next_hang_check(p, t) == t0 + 60s);
  CHECK_FALSE(judge_hang(p, t, t0 + 21s));
  CHECK_FALSE(judge_hang(p, t, t0 + 24900ms));
  p.record(1, ProgressSource::Output, t0 + 25s);  // torch imported at last
  CHECK(p.job_started());
  CHECK(next_hang_check(p, t) == t0 + 45s);
  CHECK_FALSE(judge_hang(p, t, t0 + 44s));
  CHECK(judge_hang(p, t, t0 + 45s));
}

TEST_CASE("startup: a rank that never progresses is judged at the startup timeout (b)") {
  ProgressTracker p;
  p.start_attempt({0, 1}, t0);
  const HangTimeouts t{20s, 60s};
  p.record(0, ProgressSource::Output, t0 + 1s);
  CHECK_FALSE(judge_hang(p, t, t0 + 30s));
  CHECK_FALSE(judge_hang(p, t, t0 + 59900ms));
  CHECK(next_hang_check(p, t) == t0 + 60s);
  auto v = judge_hang(p, t, t0 + 60s);
  REQUIRE(v);
  CHECK(v->before_all_started);
  CHECK(v->idle == 59s);
  CHECK(v->oldest_first.front() == 1);  // the one that never started is the first suspect
  // A rank that prints nothing while another one logs on: never "started", never hung, the
  // steady timeout judges the job after the startup timeout.
  ProgressTracker q;
  q.start_attempt({0, 1}, t0);
  for (int i = 1; i <= 30; ++i) {
    q.record(0, ProgressSource::Output, t0 + i * 5s);
    CHECK_FALSE(judge_hang(q, t, t0 + i * 5s + 4s));
  }
  CHECK(judge_hang(q, t, t0 + 170s));
}

TEST_CASE("startup: multi-node, the others' published all_started flag (c)") {
  ProgressTracker p;
  p.start_attempt({0, 1}, t0, /*other_nodes=*/true);
  const HangTimeouts t{20s, 60s};
  p.record(0, ProgressSource::Output, t0 + 1s);
  p.record(1, ProgressSource::Output, t0 + 1s);
  CHECK(p.local_ranks_started());
  CHECK_FALSE(p.job_started());  // nothing heard from the other node yet
  // The other node's fast ranks progress; its slow ones (exec'd after a zygote fault) have not.
  p.record_elsewhere(t0 + 2s, std::nullopt, /*others_started=*/false);
  CHECK_FALSE(judge_hang(p, t, t0 + 22s));
  CHECK_FALSE(judge_hang(p, t, t0 + 40s));
  CHECK(next_hang_check(p, t) == t0 + 60s);
  p.record_elsewhere(t0 + 41s, std::nullopt, /*others_started=*/true);  // the slow ones too
  CHECK(p.job_started());
  CHECK(next_hang_check(p, t) == t0 + 61s);
  CHECK_FALSE(judge_hang(p, t, t0 + 60s));
  CHECK(judge_hang(p, t, t0 + 61s));
  // A node that never says so is bounded by the startup timeout like a local rank.
  ProgressTracker q;
  q.start_attempt({0}, t0, true);
  q.record(0, ProgressSource::Output, t0 + 1s);
  q.record_elsewhere(t0 + 2s, std::nullopt, false);
  CHECK_FALSE(judge_hang(q, t, t0 + 59s));
  CHECK(judge_hang(q, t, t0 + 60s));
}

TEST_CASE("startup: once every rank started, the normal timeout applies (d)") {
  ProgressTracker p;
  p.start_attempt({0, 1}, t0);
  const HangTimeouts t{20s, 60s};
  p.record(0, ProgressSource::Output, t0 + 1s);
  p.record(1, ProgressSource::Output, t0 + 2s);
  CHECK(p.job_started());
  CHECK(next_hang_check(p, t) == t0 + 22s);
  CHECK_FALSE(judge_hang(p, t, t0 + 21s));
  auto v = judge_hang(p, t, t0 + 22s);
  REQUIRE(v);
  CHECK_FALSE(v->before_all_started);
  // A rank that exited counts as started (the live ones are what matters).
  ProgressTracker q;
  q.start_attempt({0, 1}, t0);
  q.record(0, ProgressSource::Output, t0 + 1s);
  q.record_exit(1, t0 + 2s);
  CHECK(q.job_started());
  CHECK(judge_hang(q, t, t0 + 22s));
}

// docs/reliability.md "Zygote faults", seed 36: a restart's exec'd ranks print torch's warning
// from init_process_group, then import torch._dynamo on the optimizer's construction (20+ s at
// load ~14) before their first heartbeat. On the old rule (started at the first progress of any
// source) the job was judged hung at t0 + 21 s; it fails there.
TEST_CASE("startup: a rank that sent heartbeats has started at its first heartbeat (e)") {
  ProgressTracker p;
  const HangTimeouts t{20s, 60s};
  p.start_attempt({0, 1}, t0);
  for (size_t r : {0, 1}) {
    p.record(r, ProgressSource::Output, t0 + 1s);
    p.record(r, ProgressSource::Heartbeat, t0 + 2s, 5);
  }
  CHECK(p.job_started());
  const auto t1 = t0 + 100s;  // the restart
  p.start_attempt({0, 1}, t1);
  p.record(0, ProgressSource::Output, t1 + 1s);  // the warning
  p.record(1, ProgressSource::Output, t1 + 1s);
  CHECK_FALSE(p.local_ranks_started());
  CHECK_FALSE(p.job_started());
  CHECK_FALSE(judge_hang(p, t, t1 + 21s));
  CHECK_FALSE(judge_hang(p, t, t1 + 42s));
  CHECK(next_hang_check(p, t) == t1 + 60s);
  p.record(0, ProgressSource::Heartbeat, t1 + 45s, 6);
  CHECK_FALSE(p.job_started());
  p.record(1, ProgressSource::Heartbeat, t1 + 46s, 6);
  CHECK(p.job_started());
  CHECK_FALSE(judge_hang(p, t, t1 + 65s));
  CHECK(judge_hang(p, t, t1 + 66s));
  // Never a heartbeat again: bounded by the startup timeout, as for a rank that never starts.
  ProgressTracker q;
  q.start_attempt({0}, t0);
  q.record(0, ProgressSource::Heartbeat, t0 + 2s, 1);
  q.start_attempt({0}, t1);
  q.record(0, ProgressSource::Output, t1 + 1s);
  CHECK_FALSE(judge_hang(q, t, t1 + 59s));
  CHECK(judge_hang(q, t, t1 + 60s));
  // A rank that only logged last time has started at its first line, as before; so has a rank
  // whose local index is new (a re-form grew this node).
  ProgressTracker r;
  r.start_attempt({0}, t0);
  r.record(0, ProgressSource::Output, t0 + 1s);
  r.start_attempt({0, 1}, t1);
  r.record(0, ProgressSource::Output, t1 + 1s);
  r.record(1, ProgressSource::Output, t1 + 1s);
  CHECK(r.job_started());
  CHECK(judge_hang(r, t, t1 + 21s));
}
