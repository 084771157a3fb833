// SPDX-License-Identifier: MIT
// The Agent's multi-node decisions against FakeJobRendezvous and FakeProcessControl: the job-wide
// stop (own and another node's), a lost node, the finishing phase (exit barrier), restarts on
// every node and a failed rendezvous. No sockets, no real workers, no timing.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "fake_job_rendezvous.hpp"
#include "fake_process_control.hpp"
#include "launcher/run/agent.hpp"
#include "launcher/run/agent_events.hpp"
#include "multi_node_run.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::attempt_of;
using ddp::launcher::testing::FakeBehaviour;
using ddp::launcher::testing::FakeJobRendezvous;
using ddp::launcher::testing::MultiNodeRun;
using ddp::launcher::testing::rank_of;
using ddp::launcher::testing::round_of;

namespace {

StopReason other_node_failed(int code) {
  return StopReason{code, 1, "node 1 (b): rank 3 (pid 7) failed with exit code 9", {}};
}

}  // namespace

TEST_CASE(
    "a local failure is broadcast with this node's rank and is not adopted back as another "
    "node's") {
  MultiNodeRun run;
  run.script.join = [](int, const RoundPlan&) { return round_of(1, 2, 2); };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (rank_of(env) == 3) b.exits_with = ExitStatus::exited(5);
    return b;
  };
  CHECK(run.run() == 5);
  REQUIRE(run.rendezvous->broadcasts.size() == 1);
  CHECK(run.rendezvous->broadcasts[0].node_rank == 1);
  CHECK(run.rendezvous->broadcasts[0].exit_code == 5);
  CHECK(run.rendezvous->broadcasts[0].text.find("node 1 (h): rank 3") == 0);
  CHECK(run.events("job_stop").empty());  // the store's stop was this node's own
  CHECK(run.rendezvous->barriers.empty());
  CHECK(run.rendezvous->leaves == std::vector<bool>{false});
  auto summary = run.events("summary");
  REQUIRE(summary.size() == 1);
  CHECK(summary[0]["end"] == "worker_failed");
  CHECK(summary[0]["job_root_cause"].get<std::string>().find("node 1 (h): rank 3") == 0);
}

TEST_CASE("a stop from another node stops every worker here and its exit code is the job's") {
  MultiNodeRun run;
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 2); };
  run.script.on_round = [](FakeJobRendezvous& r, int) { r.deliver_stop(other_node_failed(9)); };
  CHECK(run.run() == 9);
  REQUIRE(run.process->starts.size() == 2);
  for (const auto& s : run.process->starts)
    CHECK(run.process->signals_to(s.pid) == std::vector<int>{SIGTERM, SIGCONT});
  CHECK(run.rendezvous->broadcasts.empty());
  CHECK(run.rendezvous->barriers.empty());
  auto stops = run.events("job_stop");
  REQUIRE(stops.size() == 1);
  CHECK(stops[0]["node_rank"] == 1);
  CHECK(run.events("summary")[0]["end"] == "job_stopped");
}

TEST_CASE("a stop that is this node's own is recognised by node rank, whatever its words") {
  MultiNodeRun run;
  run.script.join = [](int, const RoundPlan&) { return round_of(1, 2, 2); };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (rank_of(env) == 2) b.exits_with = ExitStatus::exited(4);
    return b;
  };
  // The store holds a reason with this node's rank but other words (another agent version).
  run.script.on_round = [](FakeJobRendezvous& r, int) {
    r.deliver_stop(StopReason{4, 1, "something else", {}});
  };
  CHECK(run.run() == 4);
  CHECK(run.events("job_stop").empty());
}

TEST_CASE("another node's stop that wins the race replaces this node's simultaneous failure") {
  MultiNodeRun run;
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 2); };
  run.script.on_round = [&run](FakeJobRendezvous& r, int) {
    r.deliver_stop(other_node_failed(9));                             // first in the store
    run.process->signal_worker(run.process->starts[0].pid, SIGSEGV);  // and a crash here
  };
  CHECK(run.run() == 9);  // not 128+SIGSEGV: every node names the store's reason
  CHECK(run.events("summary")[0]["job_root_cause"] == other_node_failed(9).text);
}

TEST_CASE("a lost node stops the workers; exit 74, and nobody to leave to") {
  MultiNodeRun run;
  run.config.max_restarts = 3;  // a lost node is not restarted
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 3, 2); };
  run.script.on_round = [](FakeJobRendezvous& r, int) {
    r.deliver_loss(NodeLoss{"lost node 2 (c): no heartbeat for 5 s", 2});
    r.deliver_loss(
        NodeLoss{"lost node 1 (b): no heartbeat for 5 s", 1});  // a second loss is no news
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->joins == std::vector<int>{0});
  for (const auto& s : run.process->starts)
    CHECK(run.process->signals_to(s.pid) == std::vector<int>{SIGTERM, SIGCONT});
  CHECK(run.rendezvous->cancels >= 1);
  CHECK(run.rendezvous->leaves.empty());
  auto lost = run.events("node_lost");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0]["node_rank"] == 2);
  CHECK(run.events("summary")[0]["job_root_cause"] == "lost node 2 (c): no heartbeat for 5 s");
}

TEST_CASE("a lost store ends an elastic job with 74: the c10d store's host has no standby") {
  MultiNodeRun run;
  run.config.rdzv_backend = "c10d";
  run.config.max_restarts = 3;
  run.settings.dynamic = true;
  run.settings.min_nodes = 2;
  run.settings.max_nodes = 3;
  run.script.join = [](int, const RoundPlan&) { return round_of(1, 3, 2); };
  run.script.on_round = [](FakeJobRendezvous& r, int) {
    r.deliver_loss(
        NodeLoss{"lost the store at 127.0.0.1:29400 (node 0 gone?): refused", std::nullopt});
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->joins == std::vector<int>{0});  // no re-form without the store
  CHECK(run.rendezvous->broadcasts.empty());
  CHECK(run.events("summary")[0]["job_root_cause"] ==
        "lost the store at 127.0.0.1:29400 (node 0 gone?): refused");
}

TEST_CASE(
    "finishing: every node done ends the run with 0 and the store's host waits for the others") {
  MultiNodeRun run;
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 2); };
  run.workers = [](const EnvMap&) { return FakeBehaviour{ExitStatus::exited(0)}; };
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->barriers == std::vector<int>{0});
  CHECK(run.rendezvous->leaves == std::vector<bool>{false});  // this agent hosts no store here
  CHECK(run.rendezvous->broadcasts.empty());
}

TEST_CASE("finishing: a stop that arrives during the exit barrier fails this node too") {
  MultiNodeRun run;
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 2); };
  run.workers = [](const EnvMap&) { return FakeBehaviour{ExitStatus::exited(0)}; };
  run.script.barrier = [](FakeJobRendezvous&, int) {
    return JobRendezvous::BarrierResult{other_node_failed(9)};
  };
  CHECK(run.run() == 9);
  CHECK(run.events("summary")[0]["end"] == "job_stopped");
}

TEST_CASE("finishing: a stop with restarts left restarts every node in the next round") {
  MultiNodeRun run;
  run.config.max_restarts = 2;
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 2); };
  run.workers = [](const EnvMap&) { return FakeBehaviour{ExitStatus::exited(0)}; };
  run.script.barrier = [](FakeJobRendezvous&, int round) {
    return round == 0 ? JobRendezvous::BarrierResult{other_node_failed(9)}
                      : JobRendezvous::BarrierResult{AllNodesDone{}};
  };
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->joins == std::vector<int>{0, 1});
  REQUIRE(run.process->starts.size() == 4);
  CHECK(attempt_of(run.process->starts[2].env) == 1);
  auto restarts = run.events("restart");
  REQUIRE(restarts.size() == 1);
  CHECK(restarts[0]["job_root_cause"] == other_node_failed(9).text);
}

TEST_CASE(
    "finishing: losing the store during the exit barrier is exit 74, not another node's failure") {
  MultiNodeRun run;
  run.config.max_restarts = 2;
  run.script.join = [](int, const RoundPlan&) { return round_of(1, 2, 2); };
  run.workers = [](const EnvMap&) { return FakeBehaviour{ExitStatus::exited(0)}; };
  run.script.barrier = [](FakeJobRendezvous&, int) {
    return JobRendezvous::BarrierResult{NodeLoss{"lost the store: connection reset", std::nullopt}};
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->joins == std::vector<int>{0});
  CHECK(run.rendezvous->leaves.empty());
}

TEST_CASE("finishing: a node lost during the exit barrier cancels it and ends the run with 74") {
  MultiNodeRun run;
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 2); };
  run.workers = [](const EnvMap&) { return FakeBehaviour{ExitStatus::exited(0)}; };
  run.script.barrier = [](FakeJobRendezvous& r, int) {
    r.deliver_loss(NodeLoss{"lost node 1 (b): no heartbeat for 5 s", 1});
    return JobRendezvous::BarrierResult{AllNodesDone{}};  // what a cancelled barrier reports
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->cancels >= 1);
}

TEST_CASE("a failed rendezvous is exit 69 and starts no worker") {
  MultiNodeRun run;
  run.config.max_restarts = 3;
  run.script.join = [](int, const RoundPlan&) {
    return JobRendezvous::JoinResult{std::string("join timed out: 1 of 2 nodes")};
  };
  CHECK(run.run() == 69);
  CHECK(run.process->starts.empty());
  CHECK(run.rendezvous->joins == std::vector<int>{0});
  CHECK(run.events("summary")[0]["end"] == "rendezvous_failed");
}

TEST_CASE("a restart names the round left, and a loss of its nodes meanwhile ends the run: 74") {
  MultiNodeRun run;
  run.config.max_restarts = 3;
  run.script.join = [](int round, const RoundPlan&) -> JobRendezvous::JoinResult {
    if (round == 0) return round_of(1, 3, 2);
    return NodeLoss{"rendezvous 'job': lost nodes 0 (node0), 2 (node2) while the job restarted",
                    std::nullopt};
  };
  run.workers = [](const EnvMap&) { return FakeBehaviour{ExitStatus::exited(3)}; };
  CHECK(run.run() == 74);
  auto& r = *run.rendezvous;
  CHECK(r.joins == std::vector<int>{0, 1});
  CHECK(r.plans[0].previous_round == -1);
  CHECK(r.plans[0].previous_round_nodes == 0);
  // The restart's leader watches round 0's three nodes; this one was node 1 there.
  CHECK(r.plans[1].previous_round == 0);
  CHECK(r.plans[1].previous_node_rank == 1);
  CHECK(r.plans[1].previous_round_nodes == 3);
  CHECK(r.plans[1].survivors_previous_ranks.empty());  // not a re-form
  CHECK(run.process->starts.size() == 2);              // attempt 0 only
  CHECK(run.events("summary")[0]["end"] == "node_lost");
  const auto failed = run.events("rendezvous_failed");
  REQUIRE(failed.size() == 1);
  CHECK(failed[0]["error"].get<std::string>().find("while the job restarted") != std::string::npos);
}

TEST_CASE("a node dropped by the others ends 74 with its own line, from the monitor or a join") {
  // etcd: this node's lease ended after its round formed (stopped past its TTL). Before, the
  // monitor's report ended 74 and a restart's join 69, each with its own words.
  const std::string line =
      "this node was dropped from the job: its etcd lease 7a ended after round 0 of job 'job' "
      "formed with it (…)";
  MultiNodeRun run;
  run.config.max_restarts = 3;
  SUBCASE("the monitor") {
    run.script.join = [](int, const RoundPlan&) { return round_of(1, 2, 2); };
    run.script.on_round = [&](FakeJobRendezvous& r, int) {
      r.deliver_loss(NodeLoss{line, std::nullopt, true});
    };
  }
  SUBCASE("a restart's join") {
    run.script.join = [&](int round, const RoundPlan&) -> JobRendezvous::JoinResult {
      if (round == 0) return round_of(1, 2, 2);
      return NodeLoss{line, std::nullopt, true};
    };
    run.workers = [](const EnvMap&) { return FakeBehaviour{ExitStatus::exited(3)}; };
  }
  CHECK(run.run() == 74);
  CHECK(run.events("summary")[0]["end"] == "node_lost");
  CHECK(run.events("summary")[0]["job_root_cause"] == line);  // not "could not restart the job"
}

TEST_CASE("workers see the round's layout: global ranks after the nodes before this one") {
  MultiNodeRun run;
  run.script.join = [](int, const RoundPlan&) { return round_of(2, 3, 2); };
  run.workers = [](const EnvMap&) { return FakeBehaviour{ExitStatus::exited(0)}; };
  CHECK(run.run() == 0);
  REQUIRE(run.process->starts.size() == 2);
  CHECK(rank_of(run.process->starts[0].env) == 4);
  CHECK(run.process->starts[1].env.at("WORLD_SIZE") == "6");
}

// ---- Elastic (c10d MIN:MAX): a lost node is a re-form, not the end ----

namespace {

MultiNodeSettings elastic(int min_nodes, int max_nodes, int max_rescales = 100) {
  MultiNodeSettings s;
  s.dynamic = true;
  s.min_nodes = min_nodes;
  s.max_nodes = max_nodes;
  s.max_rescales = max_rescales;
  // A local failure is held this long (0.3 s) for a lost peer's verdict (loss_verdict_wait).
  s.heartbeat_timeout = std::chrono::milliseconds(200);
  s.heartbeat_interval = std::chrono::milliseconds(50);
  return s;
}

/// The round as `plan` pins it (after a re-form), else `first`.
FakeJobRendezvous::JoinResult pinned_or(const RoundPlan& plan,
                                        const ddp::rdzv::RendezvousResult& first) {
  if (plan.nodes > 0) return round_of(plan.node_rank, plan.nodes, first.local_world_size);
  return first;
}

/// The fields of a `rescale` event, sorted: one shape on both re-form paths (docs/launcher.md).
const std::vector<std::string> kRescaleFields{
    "attempt",   "change",        "event",          "new_nodes", "new_num_nodes", "new_world_size",
    "old_nodes", "old_num_nodes", "old_world_size", "reason",    "seconds",       "time"};

std::vector<std::string> field_names(const nlohmann::json& event) {
  std::vector<std::string> names;
  for (const auto& [k, v] : event.items()) names.push_back(k);
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json node_names(int nodes) {
  nlohmann::json names = nlohmann::json::array();
  for (int n = 0; n < nodes; ++n) names.push_back("node" + std::to_string(n));
  return names;
}

}  // namespace

TEST_CASE("elastic: a lost node re-forms the survivors, who restart with the new world size") {
  MultiNodeRun run;
  run.settings = elastic(2, 3);
  run.config.max_restarts = 0;  // a re-form is not a restart
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(2, 3, 2)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_loss(NodeLoss{"lost node 1 (node1): no heartbeat for 5 s", 1});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 1) b.exits_with = ExitStatus::exited(0);  // the re-formed job finishes
    return b;
  };
  CHECK(run.run() == 0);
  auto& r = *run.rendezvous;
  CHECK(r.joins == std::vector<int>{0, 1});
  CHECK(r.plans[0].nodes == 0);
  CHECK(r.plans[1].nodes == 2);      // exactly the survivors: no last-call wait
  CHECK(r.plans[1].node_rank == 1);  // old node 2 follows old node 0
  CHECK(r.plans[1].join_timeout.count() > 0);
  // The rendezvous watches the survivors' heartbeats in round 0 while they rejoin.
  CHECK(r.plans[0].previous_round == -1);
  CHECK(r.plans[1].previous_round == 0);
  CHECK(r.plans[1].survivors_previous_ranks == std::vector<int>{0, 2});
  REQUIRE(r.broadcasts.size() == 1);
  CHECK(r.broadcasts[0].survivors == std::vector<int>{0, 2});
  REQUIRE(run.process->starts.size() == 4);
  CHECK(run.process->starts[2].env.at("WORLD_SIZE") == "4");
  CHECK(rank_of(run.process->starts[2].env) == 2);
  CHECK(attempt_of(run.process->starts[2].env) == 1);
  auto rescales = run.events("rescale");
  REQUIRE(rescales.size() == 1);
  const auto& e = rescales[0];
  CHECK(field_names(e) == kRescaleFields);
  CHECK(e["attempt"] == 1);
  CHECK(e["reason"].get<std::string>().find("lost node 1 (node1)") == 0);
  CHECK(e["change"] == "loss");
  CHECK(e["old_nodes"] == node_names(3));
  CHECK(e["new_nodes"] == node_names(2));
  CHECK(e["old_num_nodes"] == 3);
  CHECK(e["new_num_nodes"] == 2);
  CHECK(e["old_world_size"] == 6);
  CHECK(e["new_world_size"] == 4);
  CHECK(e["seconds"].get<double>() >= 0.0);
  CHECK(e["seconds"].get<double>() < 5.0);  // the fake's round forms at once
  const auto changes = run.events("summary")[0]["membership_changes"];
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].get<std::string>().find("3 -> 2 node(s), world size 6 -> 4 (lost node 1") == 0);
}

TEST_CASE(
    "elastic: another node's re-form decision is adopted, and the stop it causes is no failure") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 3, 2)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0)
      r.deliver_stop(StopReason{74, 2, "lost node 1 (node1); re-forming with 2 nodes", {0, 2}});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 1) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->broadcasts.empty());
  CHECK(run.rendezvous->plans[1].nodes == 2);
  CHECK(run.rendezvous->plans[1].node_rank == 0);
  CHECK(run.events("job_stop").empty());
}

TEST_CASE(
    "elastic: the quarantined node leaving during the re-form keeps the quarantine as the reason") {
  // CI stop 42: the quarantined node revoked its lease as it left; the survivors read that as a
  // loss and the rescale event named "lost node 0" instead of the quarantine.
  MultiNodeRun run;
  run.settings = elastic(2, 3);
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(1, 3, 2)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round != 0) return;
    r.deliver_stop(
        StopReason{9,
                   0,
                   "node 0 (node0) quarantined: its workers failed 2 attempts in a row "
                   "(node_failure_limit 2); re-forming with 2 nodes: 1 (node1), 2 (node2)",
                   {1, 2}});
    r.deliver_loss(NodeLoss{"lost node 0 (node0): it left the job", 0});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 1) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->plans[1].nodes == 2);
  CHECK(run.rendezvous->plans[1].node_rank == 0);
  const auto rescale = run.events("rescale");
  REQUIRE(rescale.size() == 1);
  CHECK(rescale[0]["reason"].get<std::string>().find("quarantined") != std::string::npos);
  CHECK(rescale[0]["new_num_nodes"] == 2);
}

TEST_CASE("elastic: a node the others re-formed without ends with 74 and says so") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.script.join = [](int, const RoundPlan&) { return round_of(1, 3, 2); };
  run.script.on_round = [](FakeJobRendezvous& r, int) {
    r.deliver_stop(StopReason{74, 0, "lost node 1 (node1); re-forming with 2 nodes", {0, 2}});
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->joins == std::vector<int>{0});
  CHECK(run.events("summary")[0]["job_root_cause"].get<std::string>().rfind("this node was dropped",
                                                                            0) == 0);
}

TEST_CASE("elastic: fewer than MIN left ends the job with 74 naming the lost node") {
  MultiNodeRun run;
  run.settings = elastic(2, 3);
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 2); };
  run.script.on_round = [](FakeJobRendezvous& r, int) {
    r.deliver_loss(NodeLoss{"lost node 1 (node1): no heartbeat", 1});
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->joins == std::vector<int>{0});
  CHECK(run.rendezvous->broadcasts.empty());
  CHECK(run.events("summary")[0]["job_root_cause"] ==
        "lost node 1 (node1): 1 node left, fewer than the minimum of 2");
}

TEST_CASE("elastic: a second loss during the re-form shrinks it, or ends it below MIN") {
  SUBCASE("still MIN or more") {
    MultiNodeRun run;
    run.settings = elastic(2, 4);
    run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 4, 1)); };
    run.script.on_round = [](FakeJobRendezvous& r, int round) {
      if (round != 0) return;
      r.deliver_loss(NodeLoss{"lost node 3 (node3)", 3});
      r.deliver_loss(NodeLoss{"lost node 1 (node1)", 1});
    };
    run.workers = [](const EnvMap& env) {
      FakeBehaviour b;
      if (attempt_of(env) == 1) b.exits_with = ExitStatus::exited(0);
      return b;
    };
    CHECK(run.run() == 0);
    CHECK(run.rendezvous->plans[1].nodes == 2);
  }
  SUBCASE("below MIN") {
    MultiNodeRun run;
    run.settings = elastic(2, 3);
    run.script.join = [](int, const RoundPlan&) { return round_of(0, 3, 1); };
    run.script.on_round = [](FakeJobRendezvous& r, int) {
      r.deliver_loss(NodeLoss{"lost node 2 (node2)", 2});
      r.deliver_loss(NodeLoss{"lost node 1 (node1)", 1});
    };
    CHECK(run.run() == 74);
    CHECK(run.rendezvous->joins == std::vector<int>{0});
    CHECK(run.events("summary")[0]["job_root_cause"].get<std::string>().rfind(
              "lost nodes 1 (node1), 2 (node2)", 0) == 0);
  }
}

TEST_CASE("elastic: a loss during an adopted re-form keeps out whom that re-form left out") {
  MultiNodeRun run;
  run.settings = elastic(1, 4);
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 4, 1)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round != 0) return;
    r.deliver_stop(StopReason{74, 2, "lost node 3 (node3); re-forming with 3 nodes", {0, 1, 2}});
    r.deliver_loss(NodeLoss{"lost node 1 (node1)", 1});  // this node never noticed node 3 itself
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 1) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->plans[1].nodes == 2);  // 0 and 2: neither 1 nor 3
}

TEST_CASE("elastic: the store lost during a re-form ends the job with 74") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.script.join = [](int, const RoundPlan&) { return round_of(1, 3, 1); };
  run.script.on_round = [](FakeJobRendezvous& r, int) {
    r.deliver_loss(NodeLoss{"lost node 0 (node0)", 0});
    r.deliver_loss(
        NodeLoss{"lost the store at 127.0.0.1:29400 (node 0 gone?): refused", std::nullopt});
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->joins == std::vector<int>{0});
}

TEST_CASE("elastic: a re-form whose round never forms is exit 74 naming what was lost") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.script.join = [](int round, const RoundPlan&) -> FakeJobRendezvous::JoinResult {
    if (round == 0) return round_of(0, 3, 1);
    return std::string("rendezvous 'none' timed out after 9 s: 1 of 2 node(s) arrived");
  };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_loss(NodeLoss{"lost node 2 (node2)", 2});
  };
  CHECK(run.run() == 74);
  CHECK(run.events("summary")[0]["job_root_cause"].get<std::string>().find(
            "could not re-form the job after") == 0);
}

TEST_CASE("elastic: max_rescales 1 ends the job at the second membership change") {
  MultiNodeRun run;
  run.settings = elastic(1, 3, 1);
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 3, 1)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_loss(NodeLoss{"lost node 2 (node2)", 2});
    if (round == 1) r.deliver_loss(NodeLoss{"lost node 1 (node1)", 1});
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->joins == std::vector<int>{0, 1});
  CHECK(run.events("summary")[0]["job_root_cause"].get<std::string>().find("max_rescales 1") !=
        std::string::npos);
}

TEST_CASE("elastic: --max_restarts counts worker failures only, not re-forms") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.config.max_restarts = 1;
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 3, 1)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_loss(NodeLoss{"lost node 2 (node2)", 2});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 1) b.exits_with = ExitStatus::exited(3);  // fails once after the re-form
    if (attempt_of(env) == 2) b.exits_with = ExitStatus::exited(0);  // the one restart succeeds
    return b;
  };
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->joins == std::vector<int>{0, 1, 2});
  CHECK(run.rendezvous->plans[2].nodes == 0);  // a restart meets whoever arrives
  CHECK(run.events("restart").size() == 1);
}

TEST_CASE(
    "elastic: a restart whose round formed without a node gives the restart back and counts a "
    "rescale") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.config.max_restarts = 1;
  // Round 0 has 3 nodes; a worker fails (its peer vanished); the restart round forms with 2.
  run.script.join = [](int round, const RoundPlan&) {
    return round == 0 ? round_of(0, 3, 1) : round_of(0, 2, 1);
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 0) b.exits_with = ExitStatus::exited(1);
    if (attempt_of(env) == 1)
      b.exits_with = ExitStatus::exited(2);  // a real failure: uses the restart
    if (attempt_of(env) == 2) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->joins == std::vector<int>{0, 1, 2});
  CHECK(run.events("restart").size() == 2);
  auto rescales = run.events("rescale");
  REQUIRE(rescales.size() == 1);
  // The same shape as a re-form on a lost heartbeat: every field, old and new.
  const auto& e = rescales[0];
  CHECK(field_names(e) == kRescaleFields);
  CHECK(e["attempt"] == 1);
  CHECK(e["reason"] == "restart without the missing nodes");
  CHECK(e["change"] == "loss");
  CHECK(e["old_nodes"] == node_names(3));
  CHECK(e["new_nodes"] == node_names(2));
  CHECK(e["old_num_nodes"] == 3);
  CHECK(e["new_num_nodes"] == 2);
  CHECK(e["old_world_size"] == 3);
  CHECK(e["new_world_size"] == 2);
  CHECK(e["seconds"].get<double>() >= 0.0);
  CHECK(e["seconds"].get<double>() < 5.0);
  const auto changes = run.events("summary")[0]["membership_changes"];
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].get<std::string>().find(
            "3 -> 2 node(s), world size 3 -> 2 (restart without the missing nodes; re-formed "
            "in ") == 0);
}

TEST_CASE("elastic: a restart that admitted pending nodes reports the same rescale shape") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.config.max_restarts = 1;
  run.script.join = [](int round, const RoundPlan&) {
    return round == 0 ? round_of(0, 2, 1) : round_of(0, 3, 1);
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    b.exits_with = ExitStatus::exited(attempt_of(env) == 0 ? 1 : 0);
    return b;
  };
  CHECK(run.run() == 0);
  auto rescales = run.events("rescale");
  REQUIRE(rescales.size() == 1);
  const auto& e = rescales[0];
  CHECK(field_names(e) == kRescaleFields);
  CHECK(e["change"] == "admit");
  CHECK(e["old_nodes"] == node_names(2));
  CHECK(e["new_nodes"] == node_names(3));
  CHECK(e["old_world_size"] == 2);
  CHECK(e["new_world_size"] == 3);
  CHECK(e["seconds"].get<double>() >= 0.0);
}

TEST_CASE("rescale_fields and rescale_text: every field of the record, node lists as names") {
  RescaleRecord r{4,      "lost node 1 (b)",
                  "loss", round_of(0, 3, 2).assignment.nodes,
                  6,      round_of(0, 2, 2).assignment.nodes,
                  4,      0.314};
  const auto j = rescale_fields(r);
  CHECK(j == nlohmann::json{{"attempt", 4},
                            {"reason", "lost node 1 (b)"},
                            {"change", "loss"},
                            {"old_nodes", {"node0", "node1", "node2"}},
                            {"new_nodes", {"node0", "node1"}},
                            {"old_num_nodes", 3},
                            {"new_num_nodes", 2},
                            {"old_world_size", 6},
                            {"new_world_size", 4},
                            {"seconds", 0.314}});
  CHECK(rescale_text(r) ==
        "3 -> 2 node(s), world size 6 -> 4 (lost node 1 (b); re-formed in 0.31 s)");
}

TEST_CASE(
    "elastic: node_failure_limit 2 quarantines this node at its second failed attempt in a row") {
  MultiNodeRun run;
  run.settings = elastic(2, 3);
  run.settings.node_failure_limit = 2;
  run.config.max_restarts = 5;
  run.script.join = [](int, const RoundPlan&) { return round_of(1, 3, 2); };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (rank_of(env) == 2)
      b.exits_with = ExitStatus::exited(9);  // this node's local rank 0, always
    return b;
  };
  CHECK(run.run() == 9);
  auto& r = *run.rendezvous;
  CHECK(r.joins ==
        std::vector<int>{0, 1});  // one restart, then it leaves instead of a third attempt
  REQUIRE(r.broadcasts.size() == 2);
  CHECK(r.broadcasts[0].survivors.empty());  // the first failure: an ordinary restart
  CHECK(r.broadcasts[1].survivors == std::vector<int>{0, 2});
  CHECK(r.broadcasts[1].node_rank == 1);
  CHECK(r.broadcasts[1].text.find("quarantined: its workers failed 2 attempts in a row") !=
        std::string::npos);
  auto excluded = run.events("excluded");
  REQUIRE(excluded.size() == 1);
  CHECK(excluded[0]["reason"] == "node_failure_limit");
  CHECK(excluded[0]["node_rank"] == 1);
  CHECK(r.barriers.empty());
}

TEST_CASE("elastic: failures that are not in a row do not quarantine") {
  MultiNodeRun run;
  run.settings = elastic(2, 3);
  run.settings.node_failure_limit = 2;
  run.config.max_restarts = 3;
  run.script.join = [](int, const RoundPlan&) { return round_of(1, 3, 2); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    // Round 1 fails elsewhere: this node's streak ends there.
    if (round == 1)
      r.deliver_stop(StopReason{4, 0, "node 0 (a): rank 0 (pid 7) failed with exit code 4", {}});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    const int attempt = attempt_of(env);
    if (rank_of(env) == 2 && (attempt == 0 || attempt == 2)) b.exits_with = ExitStatus::exited(9);
    if (attempt == 3) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  CHECK(run.events("excluded").empty());
  CHECK(run.rendezvous->joins == std::vector<int>{0, 1, 2, 3});
}

// ---- Pending nodes: scale-up, hot spares, exclusion ----

namespace {

ddp::rdzv::JoinRequest newcomer(std::int64_t seq, const std::string& name = "late") {
  ddp::rdzv::JoinRequest j;
  j.seq = seq;
  j.name = name;
  j.local_world_size = 2;
  return j;
}

}  // namespace

TEST_CASE(
    "scale-up: node 0 admits an arrival at once by re-forming every node with it after them") {
  MultiNodeRun run;
  run.settings = elastic(2, 3);
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 2, 2)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_pending({newcomer(7)});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 1) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  auto& r = *run.rendezvous;
  REQUIRE(r.broadcasts.size() == 1);
  CHECK(r.broadcasts[0].survivors == std::vector<int>{0, 1});
  CHECK(r.broadcasts[0].admitted == std::vector<std::int64_t>{7});
  CHECK(r.joins == std::vector<int>{0, 1});
  CHECK(r.plans[1].nodes == 3);  // both old nodes and the newcomer
  CHECK(r.plans[1].node_rank == 0);
  REQUIRE(run.process->starts.size() == 4);
  CHECK(run.process->starts[2].env.at("WORLD_SIZE") == "6");
  auto rescales = run.events("rescale");
  REQUIRE(rescales.size() == 1);
  CHECK(rescales[0]["change"] == "admit");
  CHECK(rescales[0]["new_world_size"] == 6);
  CHECK(run.events("summary")[0]["exit_code"] == 0);
}

TEST_CASE("scale-up: only the round's node 0 decides; the others adopt its re-form") {
  MultiNodeRun run;
  run.settings = elastic(2, 3);
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(1, 2, 2)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round != 0) return;
    r.deliver_pending({newcomer(7)});  // ignored here
    r.deliver_stop(StopReason{74, 0, "admitting 1 pending node", {0, 1}, {7}});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 1) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->broadcasts.empty());
  CHECK(run.rendezvous->answers.empty());
  CHECK(run.rendezvous->plans[1].nodes == 3);
  CHECK(run.rendezvous->plans[1].node_rank == 1);
}

TEST_CASE(
    "scale-up: a pending node starts in the round it was invited to, with its restart count") {
  MultiNodeRun run;
  run.settings = elastic(2, 3);
  run.script.join = [](int, const RoundPlan&) {
    auto joined = round_of(2, 3, 2);
    joined.round = 4;
    return FakeJobRendezvous::JoinResult{joined};
  };
  run.workers = [](const EnvMap&) {
    FakeBehaviour b;
    b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  REQUIRE(run.process->starts.size() == 2);
  CHECK(attempt_of(run.process->starts[0].env) == 4);
  CHECK(rank_of(run.process->starts[0].env) == 4);
}

TEST_CASE("an arrival during a re-form waits; the next round's node 0 admits it") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 3, 2)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) {
      r.deliver_loss(NodeLoss{"lost node 2 (node2)", 2});
      r.deliver_pending({newcomer(1)});  // the re-form is under way: not now
    }
    if (round == 1) r.deliver_pending({newcomer(1)});  // the new round's monitor reports it
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 2) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  auto& r = *run.rendezvous;
  REQUIRE(r.broadcasts.size() == 2);
  CHECK(r.broadcasts[0].admitted.empty());
  CHECK(r.broadcasts[1].survivors == std::vector<int>{0, 1});
  CHECK(r.broadcasts[1].admitted == std::vector<std::int64_t>{1});
  CHECK(r.plans[1].nodes == 2);
  CHECK(r.plans[2].nodes == 3);
  auto rescales = run.events("rescale");
  REQUIRE(rescales.size() == 2);
  CHECK(rescales[0]["change"] == "loss");
  CHECK(rescales[1]["change"] == "admit");
}

TEST_CASE("hot spare: at MAX an arrival is told it is a spare, and takes a lost node's place") {
  MultiNodeRun run;
  run.settings = elastic(2, 2);
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 2, 2)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round != 0) return;
    r.deliver_pending({newcomer(3, "spare-host")});
    r.deliver_loss(NodeLoss{"lost node 1 (node1)", 1});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 1) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  auto& r = *run.rendezvous;
  REQUIRE(r.answers.size() == 1);
  CHECK(r.answers[0].kind == PendingAnswer::Kind::Spare);
  CHECK(r.answers[0].seq == 3);
  REQUIRE(r.broadcasts.size() == 1);
  CHECK(r.broadcasts[0].survivors == std::vector<int>{0});
  CHECK(r.broadcasts[0].admitted == std::vector<std::int64_t>{3});
  CHECK(r.plans[1].nodes == 2);  // the same size
  auto rescales = run.events("rescale");
  REQUIRE(rescales.size() == 1);
  CHECK(rescales[0]["change"] == "spare");
}

TEST_CASE("hot spare: a loss during a re-form that admits a spare drops the spare and shrinks") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 3, 1)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round != 0) return;
    r.deliver_pending({newcomer(3)});
    r.deliver_loss(NodeLoss{"lost node 2 (node2)", 2});
    r.deliver_loss(NodeLoss{"lost node 1 (node1)", 1});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 1) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  auto& r = *run.rendezvous;
  REQUIRE(r.broadcasts.size() == 1);
  CHECK(r.broadcasts[0].admitted == std::vector<std::int64_t>{3});
  CHECK(r.plans[1].nodes == 1);  // node 0 alone: the spare's invitation named 3 nodes
}

TEST_CASE("--exclude-hosts: node 0 refuses a pending node from an excluded host") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.settings.excluded_hosts = {"bad-host"};
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 1); };
  run.script.on_round = [](FakeJobRendezvous& r, int) {
    r.deliver_pending({newcomer(5, "bad-host")});
    r.deliver_stop(StopReason{3, 1, "node 1 (node1): rank 1 (pid 9) failed with exit code 3", {}});
  };
  CHECK(run.run() == 3);
  auto& r = *run.rendezvous;
  CHECK(r.broadcasts.empty());
  REQUIRE(r.answers.size() == 1);
  CHECK(r.answers[0].kind == PendingAnswer::Kind::Refused);
  auto excluded = run.events("excluded");
  REQUIRE(excluded.size() == 1);
  CHECK(excluded[0]["host"] == "bad-host");
  CHECK(excluded[0]["reason"] == "exclude_hosts");
}

TEST_CASE("the rescale budget spent: node 0 refuses an arrival instead of re-forming") {
  MultiNodeRun run;
  run.settings = elastic(1, 3, 0);
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 1); };
  run.script.on_round = [](FakeJobRendezvous& r, int) {
    r.deliver_pending({newcomer(2)});
    r.deliver_stop(StopReason{3, 1, "node 1 (node1): rank 1 (pid 9) failed with exit code 3", {}});
  };
  CHECK(run.run() == 3);
  REQUIRE(run.rendezvous->answers.size() == 1);
  CHECK(run.rendezvous->answers[0].kind == PendingAnswer::Kind::Refused);
  CHECK(run.rendezvous->broadcasts.empty());
}

TEST_CASE("budgets in the store: a node that joins later counts from the job's figures") {
  MultiNodeRun run;
  run.settings = elastic(1, 3, 1);
  run.config.max_restarts = 1;
  run.script.join = [](int, const RoundPlan&) {
    auto joined = round_of(2, 3, 1);
    joined.round = 2;
    joined.restarts_used = 1;  // the job restarted once and re-formed once before it came
    joined.rescales_used = 1;
    return FakeJobRendezvous::JoinResult{joined};
  };
  run.script.on_round = [](FakeJobRendezvous& r, int) {
    r.deliver_pending({newcomer(9)});  // not node 0: nothing to decide here
    r.deliver_stop(StopReason{3, 0, "node 0 (node0): rank 0 (pid 9) failed with exit code 3", {}});
  };
  CHECK(run.run() == 3);  // no restart: the job's one restart is spent
  CHECK(run.rendezvous->joins == std::vector<int>{0});
  CHECK(run.events("restart").empty());
}

TEST_CASE("budgets in the store: every join carries this node's counts for later nodes") {
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.config.max_restarts = 3;
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 3, 1)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_loss(NodeLoss{"lost node 2 (node2)", 2});
    if (round == 1) r.deliver_stop(StopReason{3, 1, "node 1 (node1): rank 1 failed", {}});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 2) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  auto& plans = run.rendezvous->plans;
  REQUIRE(plans.size() == 3);
  CHECK(plans[1].rescales_used == 1);
  CHECK(plans[1].restarts_used == 0);
  CHECK(plans[2].rescales_used == 1);
  CHECK(plans[2].restarts_used == 1);
}

TEST_CASE("budgets in the store: a node admitted from pending takes the job's, not its own") {
  // The store's host restarted with the job (restart 1), reached the round too late and waited as
  // pending; the running nodes re-formed without it (their restart given back as a rescale) and
  // admitted it. Keeping its own larger count left it one restart short of the others: on the next
  // failure it ended the job while they restarted (seed 35, pending_store_host_judged_hung.json).
  MultiNodeRun run;
  run.settings = elastic(1, 3);
  run.config.max_restarts = 1;
  run.script.join = [](int attempt, const RoundPlan&) {
    auto joined = round_of(0, 3, 1);
    if (attempt == 1) {
      joined.round = 2;  // invited to the round that admitted it
      joined.was_pending = true;
      joined.restarts_used = 0;
      joined.rescales_used = 1;
    }
    return FakeJobRendezvous::JoinResult{joined};
  };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round < 3) r.deliver_stop(other_node_failed(9));
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 3) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);  // the job's one restart was still there after the admission
  CHECK(run.rendezvous->joins == std::vector<int>{0, 1, 3});
  auto restarts = run.events("restart");
  REQUIRE(restarts.size() == 2);
  auto& plans = run.rendezvous->plans;
  REQUIRE(plans.size() == 3);
  CHECK(plans[2].restarts_used == 1);  // published for round 3: the job's, plus the one restart
  CHECK(plans[2].rescales_used == 1);  // the running nodes counted the change, not this one again
}

TEST_CASE("static spares=1: a spare replaces a lost node and the re-formed ranks are kept") {
  MultiNodeRun run;
  run.settings.dynamic = false;
  run.settings.spares = true;
  run.settings.min_nodes = run.settings.max_nodes = 3;
  run.settings.node_rank = 2;
  run.config.max_restarts = 1;
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(2, 3, 1)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) {
      r.deliver_pending({newcomer(1, "spare-host")});
      r.deliver_loss(NodeLoss{"lost node 1 (node1)", 1});
    }
    if (round == 1) r.deliver_stop(StopReason{3, 0, "node 0 (node0): rank 0 failed", {}});
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (attempt_of(env) == 2) b.exits_with = ExitStatus::exited(0);
    return b;
  };
  CHECK(run.run() == 0);
  auto& r = *run.rendezvous;
  REQUIRE(r.broadcasts.size() == 1);
  CHECK(r.broadcasts[0].survivors == std::vector<int>{0, 2});
  CHECK(r.broadcasts[0].admitted == std::vector<std::int64_t>{1});
  REQUIRE(r.plans.size() == 3);
  CHECK(r.plans[1].nodes == 3);
  CHECK(r.plans[1].node_rank == 1);  // old node 2 follows old node 0; the spare is last
  CHECK(r.plans[2].nodes == 3);      // the restart keeps the re-formed ranks
  CHECK(r.plans[2].node_rank == 1);
}

TEST_CASE("static without spares: a pending node changes nothing and a loss ends the job") {
  MultiNodeRun run;
  run.settings.min_nodes = run.settings.max_nodes = 2;
  run.settings.node_rank = 0;
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 1); };
  run.script.on_round = [](FakeJobRendezvous& r, int) {
    r.deliver_pending({newcomer(1)});
    r.deliver_loss(NodeLoss{"lost node 1 (node1): no heartbeat for 5 s", 1});
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->answers.empty());
  CHECK(run.rendezvous->broadcasts.empty());
  CHECK(run.events("summary")[0]["job_root_cause"] == "lost node 1 (node1): no heartbeat for 5 s");
}

// ---- A worker failure that is a lost peer's consequence (issue 23 item 14) ----

namespace {

/// Node 0 of a 2:2 job with a spare waiting, 1 worker per node, 3 restarts; attempt 0's worker
/// fails at once (as gloo does when a peer dies), later attempts succeed.
MultiNodeRun& spare_job(MultiNodeRun& run, std::chrono::milliseconds heartbeat_timeout) {
  run.settings = elastic(2, 2);
  run.settings.heartbeat_timeout = heartbeat_timeout;
  run.config.max_restarts = 3;
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 2, 1)); };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    b.exits_with = ExitStatus::exited(attempt_of(env) == 0 ? 1 : 0);
    return b;
  };
  return run;
}

}  // namespace

TEST_CASE(
    "spare under DDP: workers that fail before the lost peer's verdict re-form with the spare") {
  MultiNodeRun run;
  spare_job(run, std::chrono::seconds(2));  // held up to 2.1 s; the verdict comes after 0.2 s
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round != 0) return;
    r.deliver_pending({newcomer(3, "spare-host")});
    r.deliver_later(std::chrono::milliseconds(200), [](FakeJobRendezvous& f) {
      f.deliver_loss(NodeLoss{"lost node 1 (node1): no heartbeat for 2 s", 1});
    });
  };
  CHECK(run.run() == 0);
  auto& r = *run.rendezvous;
  // The failure was never offered to the job: the store's one reason is the spare swap.
  REQUIRE(r.broadcasts.size() == 1);
  CHECK(r.broadcasts[0].survivors == std::vector<int>{0});
  CHECK(r.broadcasts[0].admitted == std::vector<std::int64_t>{3});
  REQUIRE(r.plans.size() == 2);
  CHECK(r.plans[1].nodes == 2);  // pinned: this node and the spare, not "whoever arrives"
  CHECK(run.events("restart").empty());
  auto verdict = run.events("loss_verdict");
  REQUIRE(verdict.size() == 1);
  CHECK(verdict[0]["lost"] == true);
  auto rescales = run.events("rescale");
  REQUIRE(rescales.size() == 1);
  CHECK(rescales[0]["change"] == "spare");
  REQUIRE(run.process->starts.size() == 4);  // 2 workers per attempt
  CHECK(run.process->starts[2].env.at("WORLD_SIZE") == "2");
}

TEST_CASE("spare under DDP: a failure with no loss within the wait is offered and restarts") {
  MultiNodeRun run;
  spare_job(run, std::chrono::milliseconds(100));
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_pending({newcomer(3, "spare-host")});
  };
  CHECK(run.run() == 0);
  auto& r = *run.rendezvous;
  REQUIRE(r.broadcasts.size() == 1);
  CHECK(r.broadcasts[0].survivors.empty());  // this node's worker failure, after the wait
  CHECK(r.broadcasts[0].exit_code == 1);
  CHECK(r.plans.size() == 2);
  CHECK(r.plans[1].nodes == 0);  // a restart meets as configured
  CHECK(run.events("restart").size() == 1);
  auto verdict = run.events("loss_verdict");
  REQUIRE(verdict.size() == 1);
  CHECK(verdict[0]["lost"] == false);
}

TEST_CASE(
    "spare under DDP: another node's stop during the wait is adopted, this failure not sent") {
  MultiNodeRun run;
  spare_job(run, std::chrono::seconds(2));
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round != 0) return;
    r.deliver_later(std::chrono::milliseconds(100), [](FakeJobRendezvous& f) {
      f.deliver_stop(
          StopReason{5, 1, "node 1 (node1): rank 1 (pid 9) failed with exit code 5", {}});
    });
  };
  CHECK(run.run() == 0);
  auto& r = *run.rendezvous;
  CHECK(r.broadcasts.empty());
  CHECK(r.joins == std::vector<int>{0, 1});
  auto restarts = run.events("restart");
  REQUIRE(restarts.size() == 1);
  CHECK(restarts[0]["job_root_cause"] == "node 1 (node1): rank 1 (pid 9) failed with exit code 5");
}

TEST_CASE("a held failure that lost the store's race ends with the reason that won") {
  // Chaos seed 14, fault 103: two nodes' failures held for the loss verdict at once, each
  // released and offered, each ended on its own before its monitor reported the other's: the
  // nodes ended 137 and 134, naming different root causes.
  MultiNodeRun run;
  run.settings = elastic(2, 3);
  run.config.max_restarts = 0;
  run.script.join = [](int, const RoundPlan& plan) { return pinned_or(plan, round_of(0, 2, 2)); };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round != 0) return;
    // The other node's failure is in the store first; this node's monitor sees it only later.
    r.store_stop_unseen(other_node_failed(9));
    r.deliver_later(std::chrono::seconds(3),
                    [](FakeJobRendezvous& f) { f.deliver_stop(other_node_failed(9)); });
  };
  run.workers = [](const EnvMap& env) {
    FakeBehaviour b;
    if (env.at("LOCAL_RANK") == "0") b.exits_with = ExitStatus::signaled(SIGABRT);
    return b;
  };
  CHECK(run.run() == 9);  // not 128+SIGABRT: the store's reason, as on the other node
  CHECK(run.events("summary")[0]["job_root_cause"] == other_node_failed(9).text);
  REQUIRE(run.rendezvous->broadcasts.size() == 1);  // this node's failure was offered (and lost)
  CHECK(run.events("loss_verdict").size() == 1);
}

TEST_CASE("spare under DDP: a lost store during the wait ends the job with 74, not a restart") {
  MultiNodeRun run;
  spare_job(run, std::chrono::seconds(2));
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round != 0) return;
    r.deliver_later(std::chrono::milliseconds(100), [](FakeJobRendezvous& f) {
      f.deliver_loss(
          NodeLoss{"lost the store at 127.0.0.1:29400 (node 0 gone?): refused", std::nullopt});
    });
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->broadcasts.empty());
  CHECK(run.rendezvous->joins == std::vector<int>{0});
  CHECK(run.events("restart").empty());
}

TEST_CASE("an agent that stood still through the held failure's wait judges after it resumes") {
  // Chaos seed 12 (tests/chaos/schedules/store_host_stop_survivor.json): the store host's agent
  // was SIGSTOPped past the end of its hold; on resume the timer fired before the monitor's first
  // look, and the failure went out as this node's own (a restart alone, 69 after the join
  // timeout) while the other nodes were gone. Here the loop stands still 0.6 s (hold: 0.2 s) and
  // the monitor names the loss 50 ms after the loop resumes.
  MultiNodeRun run;
  spare_job(run, std::chrono::milliseconds(100));  // held 100 + 2 x 50 ms
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round != 0) return;
    r.deliver_later(std::chrono::milliseconds(50), [](FakeJobRendezvous&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
    });
    r.deliver_later(std::chrono::milliseconds(700), [](FakeJobRendezvous& f) {
      f.deliver_loss(NodeLoss{"lost node 1 (node1): no heartbeat for 0.1 s", 1});
    });
  };
  run.run();
  auto verdict = run.events("loss_verdict");
  REQUIRE(verdict.size() == 1);
  CHECK(verdict[0]["lost"] == true);
  CHECK(run.events("restart").empty());
  CHECK(run.events("node_lost").size() == 1);
}

namespace {

/// An elastic node whose first join fails because the store went away meanwhile; `pending`: it
/// had reached the store and waited there as a pending node first.
int store_lost_in_first_join(MultiNodeRun& run, bool pending) {
  run.settings = elastic(2, 3);
  run.script.while_joining = [pending](FakeJobRendezvous& f, int) {
    if (pending) f.deliver_waiting("pending");
    f.deliver_loss(
        NodeLoss{"lost the store at 10.0.0.1:29400 (node 0 gone?): refused", std::nullopt});
  };
  run.script.join = [](int, const RoundPlan&) {
    return JobRendezvous::JoinResult{
        std::string("the store at 10.0.0.1:29400 refused every connection")};
  };
  return run.run();
}

}  // namespace

TEST_CASE("a pending node that loses the job's store while it waits ends 74, as the job did") {
  // Chaos seed 13, faults 2 and 78: the store host was SIGKILLed while a late node waited as
  // pending; it ended 69 ("rendezvous failed") while every node of the job ended 74.
  MultiNodeRun run;
  CHECK(store_lost_in_first_join(run, true) == 74);
  CHECK(run.events("node_lost").empty());  // not a loss in a running round
  CHECK(run.events("rendezvous_failed").size() == 1);
}

TEST_CASE("a first join that never reached the store stays a rendezvous failure (69)") {
  MultiNodeRun run;
  CHECK(store_lost_in_first_join(run, false) == 69);
}

TEST_CASE("a static job without spares offers a worker failure at once (no loss could help)") {
  MultiNodeRun run;
  run.settings.min_nodes = run.settings.max_nodes = 2;
  run.settings.node_rank = 0;
  run.settings.heartbeat_timeout = std::chrono::seconds(30);  // a wait would show as a hang
  run.script.join = [](int, const RoundPlan&) { return round_of(0, 2, 1); };
  run.workers = [](const EnvMap&) { return FakeBehaviour{ExitStatus::exited(4)}; };
  CHECK(run.run() == 4);
  REQUIRE(run.rendezvous->broadcasts.size() == 1);
  CHECK(run.events("loss_verdict").empty());
}
