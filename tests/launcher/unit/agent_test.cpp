// SPDX-License-Identifier: MIT
// The Agent's decisions with a scripted FakeProcessControl: root cause, who is signalled, grace
// and SIGKILL, restarts and their environment, start failures, leftovers. No real workers.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>

#include "fake_process_control.hpp"
#include "launcher/run/agent.hpp"
#include "multi_node_run.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::attempt_of;
using ddp::launcher::testing::FakeBehaviour;
using ddp::launcher::testing::FakeProcessControl;
using ddp::launcher::testing::rank_of;

// These tests script the processes; the job's store is someone else's (no socket here).
using ddp::launcher::testing::kStoreElsewhere;

TEST_CASE("all workers succeed: exit 0, nobody is signalled") {
  LaunchConfig config;
  config.nproc_per_node = 3;
  auto fake_owner = std::make_unique<FakeProcessControl>(
      [](const EnvMap&) { return FakeBehaviour{ExitStatus::exited(0)}; });
  FakeProcessControl& fake = *fake_owner;
  Agent agent(AgentSetup{config, "/x", {"x"}, {}, "h", 1, kStoreElsewhere, std::nullopt},
              std::move(fake_owner));
  CHECK(agent.run() == 0);
  CHECK(fake.starts.size() == 3);
  CHECK(fake.signals.empty());
  CHECK(fake.group_signals.empty());
}

TEST_CASE("first failure is the root cause; every other worker gets SIGTERM") {
  LaunchConfig config;
  config.nproc_per_node = 4;
  config.shutdown_timeout = std::chrono::seconds(30);
  auto fake_owner = std::make_unique<FakeProcessControl>([](const EnvMap& env) {
    FakeBehaviour b;
    if (rank_of(env) == 2) b.exits_with = ExitStatus::exited(3);
    return b;
  });
  FakeProcessControl& fake = *fake_owner;
  Agent agent(AgentSetup{config, "/x", {"x"}, {}, "h", 29512, kStoreElsewhere, std::nullopt},
              std::move(fake_owner));
  CHECK(agent.run() == 3);
  REQUIRE(fake.starts.size() == 4);
  for (const auto& s : fake.starts) {
    if (rank_of(s.env) == 2) {
      CHECK(fake.signals_to(s.pid).empty());  // it is dead; only what it left in its group
      CHECK(std::count(fake.group_signals.begin(), fake.group_signals.end(),
                       std::make_pair(s.pid, SIGTERM)) == 1);
    } else {
      // Continued right after, so that a stopped worker handles the SIGTERM now.
      CHECK(fake.signals_to(s.pid) == std::vector<int>{SIGTERM, SIGCONT});
    }
    CHECK(s.env.at("MASTER_PORT") == "29512");
    CHECK(s.env.count(OrphanGuard::kTokenVariable) == 1);
  }
  CHECK_FALSE(fake.supervising);  // the guard was released
}

TEST_CASE("a worker that ignores SIGTERM gets SIGKILL when the grace expires") {
  LaunchConfig config;
  config.nproc_per_node = 2;
  config.shutdown_timeout = std::chrono::milliseconds(10);
  auto fake_owner = std::make_unique<FakeProcessControl>([](const EnvMap& env) {
    FakeBehaviour b;
    if (rank_of(env) == 0) b.exits_with = ExitStatus::signaled(SIGSEGV);
    b.ignores_sigterm = rank_of(env) == 1;
    return b;
  });
  FakeProcessControl& fake = *fake_owner;
  Agent agent(AgentSetup{config, "/x", {"x"}, {}, "h", 1, kStoreElsewhere, std::nullopt},
              std::move(fake_owner));
  CHECK(agent.run() == 128 + SIGSEGV);
  CHECK(fake.signals_to(fake.starts[1].pid) == std::vector<int>{SIGTERM, SIGCONT, SIGKILL});
}

TEST_CASE("restarts: a new attempt with the next TORCHELASTIC_RESTART_COUNT until one succeeds") {
  LaunchConfig config;
  config.nproc_per_node = 2;
  config.max_restarts = 5;
  auto fake_owner = std::make_unique<FakeProcessControl>([](const EnvMap& env) {
    FakeBehaviour b;
    // Rank 1 fails in attempts 0 and 1; everyone succeeds in attempt 2.
    if (attempt_of(env) >= 2)
      b.exits_with = ExitStatus::exited(0);
    else if (rank_of(env) == 1)
      b.exits_with = ExitStatus::exited(7);
    return b;
  });
  FakeProcessControl& fake = *fake_owner;
  Agent agent(AgentSetup{config, "/x", {"x"}, {}, "h", 1, kStoreElsewhere, std::nullopt},
              std::move(fake_owner));
  CHECK(agent.run() == 0);
  REQUIRE(fake.starts.size() == 6);  // 3 attempts × 2, despite the doubled SIGCHLDs
  for (size_t i = 0; i < fake.starts.size(); ++i) {
    CHECK(attempt_of(fake.starts[i].env) == static_cast<int>(i / 2));
    CHECK(fake.starts[i].env.at("TORCHELASTIC_MAX_RESTARTS") == "5");
    CHECK(fake.starts[i]
              .env.at("TORCHELASTIC_ERROR_FILE")
              .find("/attempt_" + std::to_string(i / 2) + "/") != std::string::npos);
  }
  // Each attempt ends (a fresh job cgroup for the next) after its workers and before the next's.
  CHECK(fake.attempt_ends == std::vector<size_t>{2, 4, 6});
}

TEST_CASE("restarts run out: the last attempt's root cause decides the exit code") {
  LaunchConfig config;
  config.nproc_per_node = 2;
  config.max_restarts = 2;
  auto fake_owner = std::make_unique<FakeProcessControl>([](const EnvMap& env) {
    FakeBehaviour b;
    if (rank_of(env) == 0) b.exits_with = ExitStatus::exited(attempt_of(env) + 10);
    return b;
  });
  FakeProcessControl& fake = *fake_owner;
  Agent agent(AgentSetup{config, "/x", {"x"}, {}, "h", 1, kStoreElsewhere, std::nullopt},
              std::move(fake_owner));
  CHECK(agent.run() == 12);
  CHECK(fake.starts.size() == 6);
}

TEST_CASE("a worker that cannot be executed stops the others with exit code 127") {
  LaunchConfig config;
  config.nproc_per_node = 3;
  config.max_restarts = 3;  // start failures are not retried differently: each attempt fails
  auto fake_owner = std::make_unique<FakeProcessControl>([](const EnvMap& env) {
    FakeBehaviour b;
    b.exec_fails = rank_of(env) == 1;
    return b;
  });
  FakeProcessControl& fake = *fake_owner;
  Agent agent(AgentSetup{config, "/x", {"x"}, {}, "h", 1, kStoreElsewhere, std::nullopt},
              std::move(fake_owner));
  CHECK(agent.run() == 127);
  CHECK(fake.signals_to(fake.starts[0].pid).front() == SIGTERM);
}

TEST_CASE("orphans left behind are SIGKILLed before the run ends") {
  LaunchConfig config;
  config.nproc_per_node = 2;
  auto fake_owner = std::make_unique<FakeProcessControl>([](const EnvMap&) {
    FakeBehaviour b;
    b.exits_with = ExitStatus::exited(0);
    b.leaves_orphan = true;
    return b;
  });
  FakeProcessControl& fake = *fake_owner;
  Agent agent(AgentSetup{config, "/x", {"x"}, {}, "h", 1, kStoreElsewhere, std::nullopt},
              std::move(fake_owner));
  CHECK(agent.run() == 0);
  int killed = 0;
  for (auto [pid, sig] : fake.process_signals) killed += sig == SIGKILL && pid >= 50'000 + 40'000;
  CHECK(killed == 2);
  CHECK(fake.live_children().empty());
}
