// SPDX-License-Identifier: MIT
#pragma once
// The test fixture shared by the Agent's multi-node unit tests (agent_multinode_test.cpp):
// one agent with both seams (processes, rendezvous) faked.
#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fake_job_rendezvous.hpp"
#include "fake_process_control.hpp"
#include "launcher/run/agent.hpp"

namespace ddp::launcher::testing {

inline const StorePlan kStoreElsewhere = [] {
  StorePlan plan;
  plan.role = StoreRole::Client;
  plan.bind_address = "";
  plan.connect_host = "127.0.0.1";
  return plan;
}();

/// One agent of a multi-node job with both seams faked; the fakes stay reachable after run().
struct MultiNodeRun {
  LaunchConfig config;
  FakeProcessControl* process = nullptr;
  FakeJobRendezvous* rendezvous = nullptr;
  FakeJobRendezvous::Script script;
  FakeProcessControl::Script workers = [](const EnvMap&) {
    return FakeBehaviour{};
  };  // run until stopped
  MultiNodeSettings settings;
  StorePlan store = kStoreElsewhere;  // where this agent finds the job's store
  int agent_port = 29500;
  std::string events_path;
  std::unique_ptr<Agent> agent;  // kept after run(): it owns both fakes

  MultiNodeRun() {
    config.nproc_per_node = 2;
    config.shutdown_timeout = std::chrono::seconds(30);
    // A local failure in a job that takes spares is held this long (0.3 s) for a lost peer's
    // verdict (loss_verdict_wait); the real default would make each such test wait 7 s.
    settings.heartbeat_timeout = std::chrono::milliseconds(200);
    settings.heartbeat_interval = std::chrono::milliseconds(50);
    char tmpl[] = "/tmp/ddprun-agent-events-XXXXXX";
    int fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    ::close(fd);
    events_path = tmpl;
    config.events = events_path;
  }
  ~MultiNodeRun() { ::unlink(events_path.c_str()); }
  MultiNodeRun(const MultiNodeRun&) = delete;
  MultiNodeRun& operator=(const MultiNodeRun&) = delete;

  int run() {
    auto process_owner = std::make_unique<FakeProcessControl>(workers);
    process = process_owner.get();
    JobRendezvousFactory factory = [this](boost::asio::io_context& loop,
                                          JobRendezvous::Events events) {
      auto fake = std::make_unique<FakeJobRendezvous>(loop, std::move(events), script);
      rendezvous = fake.get();
      return std::unique_ptr<JobRendezvous>(std::move(fake));
    };
    AgentSetup setup{config, "/x", {"x"}, {}, "h", agent_port, store, settings};
    agent = std::make_unique<Agent>(std::move(setup), std::move(process_owner), factory);
    return agent->run();
  }

  /// The --events records of one kind.
  std::vector<nlohmann::json> events(const std::string& kind) const {
    std::vector<nlohmann::json> out;
    std::ifstream in(events_path);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.at("event") == kind) out.push_back(j);
    }
    return out;
  }
};

}  // namespace ddp::launcher::testing
