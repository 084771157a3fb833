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
