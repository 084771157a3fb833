// SPDX-License-Identifier: MIT
// The elastic rules (launcher/run/membership): which losses a c10d MIN:MAX job survives, with
// which survivors, and how the survivors re-form.
#include <doctest/doctest.h>

#include "launcher/run/membership.hpp"

using namespace ddp::launcher;

namespace {

std::vector<ddp::rdzv::NodeAssignment> nodes(int n) {
  std::vector<ddp::rdzv::NodeAssignment> out;
  for (int i = 0; i < n; ++i)
    out.push_back({i, std::string(1, static_cast<char>('a' + i)), 2, 2 * i, i + 1});
  return out;
}

const ElasticPolicy kTwoToFour{true, 2, 100};

}  // namespace

TEST_CASE("a loss that leaves MIN nodes or more re-forms with the survivors in their old order") {
  auto d = decide_loss(kTwoToFour, nodes(3), {1}, 0);
  CHECK(d.rescale);
  CHECK(d.survivors == std::vector<int>{0, 2});
  CHECK(d.text == "lost node 1 (b); re-forming with 2 nodes: 0 (a), 2 (c)");
}

TEST_CASE("two nodes lost at once: one re-form without both") {
  auto d = decide_loss(ElasticPolicy{true, 1, 100}, nodes(4), {0, 2}, 0);
  CHECK(d.rescale);
  CHECK(d.survivors == std::vector<int>{1, 3});
  CHECK(d.text.rfind("lost nodes 0 (a), 2 (c); re-forming with 2 nodes", 0) == 0);
}

TEST_CASE("fewer than MIN left: the job ends, naming the lost nodes") {
  auto d = decide_loss(kTwoToFour, nodes(2), {1}, 0);
  CHECK_FALSE(d.rescale);
  CHECK(d.survivors.empty());
  CHECK(d.text == "lost node 1 (b): 1 node left, fewer than the minimum of 2");
  // A second loss during a re-form is judged with both.
  auto two = decide_loss(kTwoToFour, nodes(3), {0, 1}, 0);
  CHECK_FALSE(two.rescale);
  CHECK(two.text.rfind("lost nodes 0 (a), 1 (b): 1 node left", 0) == 0);
}

TEST_CASE("the rescale budget: the change after the last allowed one ends the job") {
  ElasticPolicy one{true, 1, 1};
  CHECK(decide_loss(one, nodes(3), {2}, 0).rescale);
  auto d = decide_loss(one, nodes(2), {1}, 1);
  CHECK_FALSE(d.rescale);
  CHECK(d.text == "lost node 1 (b): the job already changed membership 1 time (max_rescales 1)");
  CHECK_FALSE(decide_loss(ElasticPolicy{true, 1, 0}, nodes(3), {2}, 0).rescale);
}

TEST_CASE("a job that is not elastic (static, or MIN == MAX) never re-forms") {
  auto d = decide_loss(ElasticPolicy{false, 1, 100}, nodes(3), {2}, 0);
  CHECK_FALSE(d.rescale);
  CHECK(d.text == "lost node 2 (c)");
}

TEST_CASE("the re-form round: contiguous ranks in the old order, exactly the survivors") {
  auto plan = reform_plan({0, 2, 3}, 2);
  REQUIRE(plan);
  CHECK(plan->nodes == 3);
  CHECK(plan->node_rank == 1);
  CHECK(reform_plan({0, 2, 3}, 0)->node_rank == 0);
  CHECK(reform_plan({0, 2, 3}, 3)->node_rank == 2);
  CHECK_FALSE(reform_plan({0, 2, 3}, 1));  // dropped by the others
}

TEST_CASE(
    "node_failure_limit: the K-th failed attempt in a row quarantines the node; the others "
    "re-form") {
  CHECK_FALSE(
      decide_quarantine(kTwoToFour, nodes(3), 2, 1, 2, 0).rescale);  // one failure: a restart
  CHECK_FALSE(decide_quarantine(kTwoToFour, nodes(3), 2, 5, 0, 0).rescale);  // limit 0: off
  auto d = decide_quarantine(kTwoToFour, nodes(3), 1, 2, 2, 0);
  CHECK(d.rescale);
  CHECK(d.survivors == std::vector<int>{0, 2});
  CHECK(d.text ==
        "node 1 (b) quarantined: its workers failed 2 attempts in a row (node_failure_limit 2); "
        "re-forming with 2 nodes: 0 (a), 2 (c)");
}

TEST_CASE(
    "node_failure_limit: no quarantine when the others could not go on (below MIN, budget spent, "
    "static)") {
  auto below_min = decide_quarantine(kTwoToFour, nodes(2), 1, 2, 2, 0);
  CHECK_FALSE(below_min.rescale);
  CHECK(below_min.text.empty());  // the failure takes the usual way (restart or end)
  CHECK_FALSE(decide_quarantine(ElasticPolicy{true, 2, 1}, nodes(3), 1, 2, 2, 1).rescale);
  CHECK_FALSE(decide_quarantine(ElasticPolicy{false, 2, 100}, nodes(3), 1, 2, 2, 0).rescale);
}

// ---- Arrivals, spares, exclusion (pending nodes) ----

namespace {

ddp::rdzv::JoinRequest arrival(std::int64_t seq, const std::string& name,
                               ddp::rdzv::AgreedSettings settings = {}) {
  ddp::rdzv::JoinRequest j;
  j.seq = seq;
  j.name = name;
  j.local_world_size = 2;
  j.settings = std::move(settings);
  return j;
}

ElasticPolicy c10d(int min_nodes, int max_nodes, int max_rescales = 100) {
  ElasticPolicy p{min_nodes < max_nodes, min_nodes, max_rescales};
  p.max_nodes = max_nodes;
  p.takes_pending = true;
  return p;
}

}  // namespace

TEST_CASE("an arrival below MAX is admitted at once: every node stays, the newcomer after them") {
  auto d = decide_arrivals(c10d(2, 3), nodes(2), {arrival(1, "x")}, {}, 0);
  CHECK(d.answers.empty());
  CHECK(d.survivors == std::vector<int>{0, 1});
  CHECK(d.admitted == std::vector<std::int64_t>{1});
  CHECK(d.text ==
        "admitting 1 pending node: x (pending #1); re-forming with 3 nodes: 0 (a), 1 (b), "
        "x (pending #1)");
  // Only up to MAX; the rest wait as spares.
  auto two = decide_arrivals(c10d(1, 3), nodes(2), {arrival(1, "x"), arrival(2, "y")}, {}, 0);
  CHECK(two.admitted == std::vector<std::int64_t>{1});
  REQUIRE(two.answers.size() == 1);
  CHECK(two.answers[0].kind == PendingAnswer::Kind::Spare);
  CHECK(two.answers[0].seq == 2);
}

TEST_CASE("an arrival when MAX nodes run waits as a spare, told once") {
  auto d = decide_arrivals(c10d(2, 2), nodes(2), {arrival(4, "x")}, {}, 0);
  CHECK(d.admitted.empty());
  REQUIRE(d.answers.size() == 1);
  CHECK(d.answers[0].kind == PendingAnswer::Kind::Spare);
  CHECK(decide_arrivals(c10d(2, 2), nodes(2), {arrival(4, "x")}, {4}, 0).answers.empty());
}

TEST_CASE("admit=restart: an arrival below MAX waits for the next restart or re-form") {
  auto policy = c10d(1, 3);
  policy.admit_at_once = false;
  auto d = decide_arrivals(policy, nodes(2), {arrival(1, "x")}, {}, 0);
  CHECK(d.admitted.empty());
  CHECK(d.answers.empty());
  auto at_restart = restart_admissions(policy, 2, 5, {arrival(1, "x"), arrival(2, "y")});
  REQUIRE(at_restart.size() == 1);  // one place left below MAX
  CHECK(at_restart[0].kind == PendingAnswer::Kind::Restart);
  CHECK(at_restart[0].round == 5);
  CHECK(at_restart[0].seq == 1);
}

TEST_CASE("an excluded host or one with other settings is refused, never admitted") {
  auto policy = c10d(1, 3);
  policy.excluded_hosts = {"bad"};
  policy.settings = {{"--max_restarts", "1"}};
  policy.node_name = "a";
  auto d = decide_arrivals(
      policy, nodes(2),
      {arrival(1, "bad", {{"--max_restarts", "1"}}), arrival(2, "odd", {{"--max_restarts", "3"}})},
      {}, 0);
  CHECK(d.admitted.empty());
  REQUIRE(d.answers.size() == 2);
  CHECK(d.answers[0].kind == PendingAnswer::Kind::Refused);
  CHECK(d.answers[0].reason == "host 'bad' is excluded from this job (--exclude-hosts)");
  CHECK(d.answers[1].kind == PendingAnswer::Kind::Refused);
  CHECK(d.answers[1].reason.find("--max_restarts differs between nodes") != std::string::npos);
  // Nor taken as a spare.
  CHECK(decide_loss(policy, nodes(3), {2}, 0, {arrival(1, "bad", {{"--max_restarts", "1"}})})
            .admitted.empty());
}

TEST_CASE("the rescale budget spent: arrivals are refused") {
  auto d = decide_arrivals(c10d(1, 3, 1), nodes(2), {arrival(1, "x")}, {}, 1);
  CHECK(d.admitted.empty());
  REQUIRE(d.answers.size() == 1);
  CHECK(d.answers[0].kind == PendingAnswer::Kind::Refused);
  CHECK(d.answers[0].reason == "the job already changed membership 1 time (max_rescales 1)");
}

TEST_CASE("a spare takes a lost node's place: MIN:MAX = 2:2 re-forms at the same size") {
  auto d = decide_loss(c10d(2, 2), nodes(2), {0}, 0, {arrival(3, "s")});
  CHECK(d.rescale);
  CHECK(d.survivors == std::vector<int>{1});
  CHECK(d.admitted == std::vector<std::int64_t>{3});
  CHECK(d.text == "lost node 0 (a); re-forming with 2 nodes: 1 (b) and spare s (pending #3)");
  // Without a spare the loss ends a 2:2 job, as before.
  auto none = decide_loss(c10d(2, 2), nodes(2), {0}, 0, {});
  CHECK_FALSE(none.rescale);
  CHECK(none.text == "lost node 0 (a)");
  // Spares fill up to MAX only; a MIN:MAX job takes as many as there are places.
  auto two = decide_loss(c10d(1, 3), nodes(3), {0, 1}, 0,
                         {arrival(1, "s"), arrival(2, "t"), arrival(3, "u")});
  CHECK(two.admitted == std::vector<std::int64_t>{1, 2});
  // A spare does not bypass the budget.
  CHECK_FALSE(decide_loss(c10d(2, 2, 0), nodes(2), {0}, 0, {arrival(3, "s")}).rescale);
}

TEST_CASE("what a re-form is: loss, admission or spare swap") {
  CHECK(std::string(change_kind(3, 2, 0)) == "loss");
  CHECK(std::string(change_kind(2, 2, 1)) == "admit");
  CHECK(std::string(change_kind(2, 1, 1)) == "spare");
}

TEST_CASE("a worker failure waits for the loss verdict only where a loss could be survived") {
  using std::chrono::milliseconds;
  const milliseconds timeout(2000), interval(300);
  // Elastic, or a job that takes spares: a peer's death is reported within the timeout plus two
  // intervals of the failure it caused (its last heartbeat read late, the check once per interval).
  CHECK(loss_verdict_wait(kTwoToFour, 3, timeout, interval) == milliseconds(2600));
  ElasticPolicy spares{false, 2, 100};
  spares.max_nodes = 2;
  spares.takes_pending = true;  // 2:2 (MIN == MAX) with a hot spare, or static spares=1
  CHECK(loss_verdict_wait(spares, 2, timeout, interval) == milliseconds(2600));
  // Nothing to wait for: a static job without spares cannot survive the loss anyway, and a
  // one-node round has no peer to lose.
  CHECK(loss_verdict_wait(ElasticPolicy{}, 2, timeout, interval) == milliseconds(0));
  CHECK(loss_verdict_wait(kTwoToFour, 1, timeout, interval) == milliseconds(0));
}

TEST_CASE(
    "a held failure's wait is renewed after this agent stood still, a bounded number of times") {
  using std::chrono::milliseconds;
  const milliseconds interval(300);
  CHECK_FALSE(renew_loss_verdict_hold(milliseconds(0), interval, 0));    // on time
  CHECK_FALSE(renew_loss_verdict_hold(milliseconds(300), interval, 0));  // a slow loop, no stall
  CHECK(renew_loss_verdict_hold(milliseconds(4000), interval, 0));       // SIGSTOPped 4 s
  CHECK(renew_loss_verdict_hold(milliseconds(4000), interval, kMaxHoldRenewals - 1));
  CHECK_FALSE(renew_loss_verdict_hold(milliseconds(4000), interval, kMaxHoldRenewals));
}

TEST_CASE("a restart meets as configured; a static job keeps its ranks; the left round is named") {
  RoundPlan current;
  current.nodes = 3;
  current.node_rank = 1;
  current.join_timeout = std::chrono::milliseconds(500);
  ddp::rdzv::RendezvousResult left;
  left.round = 4;
  left.node_rank = 2;
  left.num_nodes = 3;
  const RoundPlan dynamic = restart_plan(current, true, left);
  CHECK(dynamic.nodes == 0);
  CHECK(dynamic.node_rank == -1);
  CHECK(dynamic.join_timeout.count() == 0);
  CHECK(dynamic.previous_round == 4);
  CHECK(dynamic.previous_node_rank == 2);
  CHECK(dynamic.previous_round_nodes == 3);
  const RoundPlan fixed = restart_plan(current, false, std::nullopt);
  CHECK(fixed.nodes == 3);
  CHECK(fixed.node_rank == 1);
  CHECK(fixed.previous_round == -1);
  CHECK(fixed.previous_round_nodes == 0);
}

TEST_CASE("budgets after a join: a pending node takes the published ones, others the larger") {
  ddp::rdzv::RendezvousResult joined;
  joined.restarts_used = 1;
  joined.rescales_used = 2;
  Budgets b = budgets_after_join({3, 0, false}, joined);
  CHECK(b.restarts_used == 3);
  CHECK(b.rescales_used == 2);
  CHECK_FALSE(b.published);
  joined.was_pending = true;  // seed 35: its own larger count would leave it a restart short
  b = budgets_after_join({3, 0, false}, joined);
  CHECK(b.restarts_used == 1);
  CHECK(b.rescales_used == 2);
  CHECK(b.published);
  joined.rescales_used = -1;  // nothing published: its own count stands
  b = budgets_after_join({3, 0, false}, joined);
  CHECK(b.restarts_used == 3);
  CHECK(b.rescales_used == 0);
  CHECK_FALSE(b.published);
}

TEST_CASE("a restart's round with fewer nodes is a loss (elastic), with more an admission") {
  CHECK(restart_change(3, 2, true) == RestartChange::Loss);
  CHECK(restart_change(3, 2, false) == RestartChange::None);  // static: the join decides
  CHECK(restart_change(2, 3, true) == RestartChange::Admit);
  CHECK(restart_change(2, 3, false) == RestartChange::Admit);
  CHECK(restart_change(3, 3, true) == RestartChange::None);
  CHECK(restart_change(0, 3, true) == RestartChange::None);  // no round left (the first one)
}
