// SPDX-License-Identifier: MIT
// The Agent's decisions around a standby store (--rdzv_endpoint PRIMARY,STANDBY) against
// FakeJobRendezvous and FakeProcessControl: a lost store is handed to the standby once, the
// primary's host is then lost like any node and the survivors re-form with workers pointed at
// the standby; without a standby, or when it does not take over, a lost store is still exit 74.
#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "fake_job_rendezvous.hpp"
#include "fake_process_control.hpp"
#include "launcher/run/agent.hpp"
#include "multi_node_run.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::attempt_of;
using ddp::launcher::testing::FakeBehaviour;
using ddp::launcher::testing::FakeJobRendezvous;
using ddp::launcher::testing::MultiNodeRun;
using ddp::launcher::testing::round_of;

namespace {

const NodeLoss kStoreLost{"lost the store at 127.0.0.1:29400 (its host gone?): refused",
                          std::nullopt};

/// Node 1 of a c10d 2:3 job whose store is at 127.0.0.1:29400; both seams faked.
struct FailoverRun : MultiNodeRun {
  FailoverRun() {
    workers = [](const EnvMap& env) {
      FakeBehaviour b;
      if (attempt_of(env) > 0) b.exits_with = ExitStatus::exited(0);  // the re-formed job ends
      return b;
    };
    config.nproc_per_node = 1;
    config.rdzv_backend = "c10d";
    config.master_addr = "127.0.0.1";
    config.master_port = 29400;
    settings.dynamic = true;
    settings.min_nodes = 2;
    settings.max_nodes = 3;
    settings.standby = HostPort{"127.0.0.9", 29401};
    script.join = [](int, const RoundPlan& plan) -> JobRendezvous::JoinResult {
      if (plan.nodes > 0) return round_of(plan.node_rank, plan.nodes, 1);
      return round_of(1, 3, 1);
    };
    store.role = StoreRole::Client;
    store.bind_address = "";
    store.connect_host = "127.0.0.1";
    store.port = 29400;
    agent_port = 29400;
  }
};

JobRendezvous::FailoverResult promoted(FakeJobRendezvous&) {
  return StorePromoted{"127.0.0.9", 29401, 2};
}

/// The store is lost in round 0, the standby takes over, and on it node 0 (the primary's host)
/// stops heartbeating.
void lose_the_store_then_its_host(FailoverRun& run) {
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_loss(kStoreLost);
  };
  run.script.fail_over = promoted;
  run.script.after_fail_over = [](FakeJobRendezvous& r) {
    r.deliver_loss(NodeLoss{"lost node 0 (node0): no heartbeat for 5 s", 0});
  };
}

}  // namespace

TEST_CASE("failover: the standby takes over, the store's host is lost, the survivors re-form") {
  FailoverRun run;
  lose_the_store_then_its_host(run);
  CHECK(run.run() == 0);
  auto& r = *run.rendezvous;
  CHECK(r.failovers == 1);
  CHECK(r.joins == std::vector<int>{0, 1});
  CHECK(r.plans[1].nodes == 2);  // the survivors, without the primary's host
  CHECK(r.plans[1].node_rank == 0);
  REQUIRE(r.broadcasts.size() == 1);
  CHECK(r.broadcasts[0].survivors == std::vector<int>{1, 2});
  REQUIRE(run.process->starts.size() == 2);
  // The first attempt's worker met on the primary, the re-formed one on the standby.
  CHECK(run.process->starts[0].env.at("MASTER_ADDR") == "127.0.0.1");
  CHECK(run.process->starts[0].env.at("MASTER_PORT") == "29400");
  CHECK(run.process->starts[1].env.at("MASTER_ADDR") == "127.0.0.9");
  CHECK(run.process->starts[1].env.at("MASTER_PORT") == "29401");
  CHECK(run.process->starts[1].env.at("WORLD_SIZE") == "2");
  auto failover = run.events("store_failover");
  REQUIRE(failover.size() == 1);
  CHECK(failover[0]["to"] == "127.0.0.9:29401");
  CHECK(failover[0]["from"] == "127.0.0.1:29400");
  CHECK(failover[0]["epoch"] == 2);
  CHECK(run.events("store_lost").size() == 1);
  CHECK(run.events("rescale").size() == 1);
  CHECK(r.leaves == std::vector<bool>{false});  // another node serves the store: no need to stay
}

TEST_CASE("failover: the node whose standby took over stays until the others have left") {
  // It now serves the job's store, as the primary's host did: leaving at once would take the
  // store from a node still reading the exit barrier's outcome (seen as exit 74 there).
  FailoverRun run;
  run.store.standby_role = StoreRole::TryHost;
  run.store.standby_bind_address = "127.0.0.1";
  run.store.standby_port = 0;  // the kernel's pick: the fake's promotion does not connect to it
  lose_the_store_then_its_host(run);
  CHECK(run.run() == 0);
  auto hosted = run.events("standby_store");
  REQUIRE(!hosted.empty());
  CHECK(hosted[0]["role"] == "host");  // this node served the standby
  CHECK(run.rendezvous->failovers == 1);
  CHECK(run.rendezvous->leaves == std::vector<bool>{true});
}

TEST_CASE("failover: a second report of the lost store while the standby is asked is no news") {
  FailoverRun run;
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) {
      r.deliver_loss(kStoreLost);
      r.deliver_loss(kStoreLost);  // the exit barrier's client, say
    }
  };
  run.script.fail_over = promoted;
  run.script.after_fail_over = [](FakeJobRendezvous& r) {
    r.deliver_loss(NodeLoss{"lost node 0 (node0): no heartbeat for 5 s", 0});
  };
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->failovers == 1);
}

TEST_CASE("failover: a standby that does not take over ends the job with 74 saying why") {
  FailoverRun run;
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_loss(kStoreLost);
  };
  run.script.fail_over = [](FakeJobRendezvous&) {
    return JobRendezvous::FailoverResult{
        std::string("the standby store at 127.0.0.9:29401 did not take over: connection refused")};
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->failovers == 1);
  CHECK(run.rendezvous->joins == std::vector<int>{0});
  auto summary = run.events("summary");
  REQUIRE(summary.size() == 1);
  const std::string cause = summary[0]["job_root_cause"];
  CHECK(cause.find("lost the store at 127.0.0.1:29400") == 0);
  CHECK(cause.find("did not take over: connection refused") != std::string::npos);
}

TEST_CASE("failover: only one; the standby lost too is exit 74") {
  FailoverRun run;
  run.settings.min_nodes = 1;
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_loss(kStoreLost);
  };
  run.script.fail_over = promoted;
  run.script.after_fail_over = [](FakeJobRendezvous& r) {
    r.deliver_loss(
        NodeLoss{"lost the store at 127.0.0.9:29401 (its host gone?): refused", std::nullopt});
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->failovers == 1);
}

TEST_CASE("failover: without a standby a lost store is exit 74 and nobody is asked") {
  FailoverRun run;
  run.settings.standby = HostPort{};
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_loss(kStoreLost);
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->failovers == 0);
  CHECK(run.events("store_lost").empty());
}

TEST_CASE("failover: a restart's join that cannot reach the store is retried on the standby") {
  FailoverRun run;
  run.config.max_restarts = 1;
  bool store_gone = false;
  run.script.join = [&run, &store_gone](int round, const RoundPlan&) -> JobRendezvous::JoinResult {
    if (round == 0) return round_of(1, 3, 1);
    if (!store_gone) {  // the workers failed first; the store's loss shows in the next join
      store_gone = true;
      run.rendezvous->deliver_loss(kStoreLost);
      return std::string("the store at 127.0.0.1:29400 refused every connection for 15000 ms");
    }
    return round_of(0, 2, 1);  // on the standby, without the store's host
  };
  run.script.on_round = [](FakeJobRendezvous& r, int round) {
    if (round == 0) r.deliver_stop(StopReason{3, 0, "node 0 (a): rank 0 failed", {}});
  };
  run.script.fail_over = promoted;
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->failovers == 1);
  CHECK(run.rendezvous->joins == std::vector<int>{0, 1, 1});
  REQUIRE(run.process->starts.size() == 2);
  CHECK(run.process->starts[1].env.at("MASTER_ADDR") == "127.0.0.9");
  CHECK(run.process->starts[1].env.at("WORLD_SIZE") == "2");
  CHECK(run.events("rendezvous_failed").empty());
}

TEST_CASE("failover: the first join never fails over (the store may not be up yet)") {
  FailoverRun run;
  run.script.join = [&run](int, const RoundPlan&) -> JobRendezvous::JoinResult {
    run.rendezvous->deliver_loss(kStoreLost);
    return std::string("the store at 127.0.0.1:29400 refused every connection for 15000 ms");
  };
  CHECK(run.run() == 69);
  CHECK(run.rendezvous->failovers == 0);
}

TEST_CASE("failover: an exit barrier that lost the store resumes on the standby") {
  FailoverRun run;
  run.workers = [](const EnvMap&) {
    FakeBehaviour b;
    b.exits_with = ExitStatus::exited(0);
    return b;
  };
  run.script.barrier = [](FakeJobRendezvous& r, int) -> JobRendezvous::BarrierResult {
    if (r.failovers == 0) return NodeLoss{"lost the store during the exit barrier", std::nullopt};
    return AllNodesDone{};  // every node's arrival is on the standby
  };
  run.script.fail_over = promoted;
  CHECK(run.run() == 0);
  CHECK(run.rendezvous->failovers == 1);
  CHECK(run.rendezvous->barriers == std::vector<int>{0, 0});  // one round, the wait resumed
  CHECK(run.rendezvous->joins == std::vector<int>{0});
}

TEST_CASE("failover: an exit barrier whose standby does not take over is exit 74") {
  FailoverRun run;
  run.workers = [](const EnvMap&) {
    FakeBehaviour b;
    b.exits_with = ExitStatus::exited(0);
    return b;
  };
  run.script.barrier = [](FakeJobRendezvous&, int) -> JobRendezvous::BarrierResult {
    return NodeLoss{"lost the store during the exit barrier", std::nullopt};
  };
  CHECK(run.run() == 74);
  CHECK(run.rendezvous->failovers == 1);
  CHECK(run.rendezvous->barriers == std::vector<int>{0});
}
