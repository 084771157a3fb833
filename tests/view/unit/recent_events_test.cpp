// SPDX-License-Identifier: MIT
// RecentEvents: the ring behind /status's "events" and the job digest behind "job".
#include <doctest/doctest.h>

#include "launcher/health/recent_events.hpp"

using ddp::launcher::health::RecentEvents;
using nlohmann::json;

namespace {

json rendezvous(int attempt, int world, std::vector<std::string> names) {
  json nodes = json::array();
  int base = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    nodes.push_back(
        {{"node_rank", i}, {"name", names[i]}, {"local_world_size", 2}, {"base_rank", base}});
    base += 2;
  }
  return {
      {"event", "rendezvous"},     {"time", 1.0},         {"attempt", attempt}, {"node_rank", 0},
      {"num_nodes", names.size()}, {"world_size", world}, {"nodes", nodes}};
}

const json* node_named(const json& job, const std::string& name, const std::string& state) {
  for (const auto& n : job["nodes"]) {
    if (n["name"] == name && n["state"] == state) return &n;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("the ring keeps the newest events, numbered, and counts what it dropped") {
  RecentEvents recent(3);
  for (int i = 0; i < 5; ++i) recent.add({{"event", "straggler"}, {"time", i}, {"rank", i}});
  auto j = recent.events_json();
  REQUIRE(j["events"].size() == 3);
  CHECK(j["events"][0]["rank"] == 2);
  CHECK(j["events"][2]["seq"] == 5);
  CHECK(j["dropped"] == 2);
}

TEST_CASE("compact events carry no argv, environment or token, and cut long strings") {
  json e{{"event", "launch"},
         {"argv", {"--secret"}},
         {"env", {{"A", "b"}}},
         {"rdzv_token", "s3cret"},
         {"program", std::string(1000, 'x')}};
  json c = RecentEvents::compact(e);
  CHECK_FALSE(c.contains("argv"));
  CHECK_FALSE(c.contains("env"));
  CHECK_FALSE(c.contains("rdzv_token"));
  CHECK(c["program"].get<std::string>().size() < 300);
  CHECK(c.dump().find("s3cret") == std::string::npos);
}

TEST_CASE("the digest follows a lost node, a spare and a re-form") {
  RecentEvents recent;
  recent.add({{"event", "launch"},
              {"run_id", "job7"},
              {"world_size", 4},
              {"node_rank", 0},
              {"nnodes", 2}});
  recent.add(rendezvous(0, 4, {"a", "b"}));
  recent.add({{"event", "worker_start"}, {"attempt", 0}, {"rank", 0}});
  auto job = recent.job_json();
  CHECK(job["run_id"] == "job7");
  CHECK(job["state"] == "running");
  CHECK(node_named(job, "a", "running"));
  CHECK(node_named(job, "b", "running"));

  recent.add({{"event", "spare"}, {"node", "c"}});
  CHECK(node_named(recent.job_json(), "c", "spare"));
  recent.add({{"event", "node_lost"}, {"node_rank", 1}, {"message", "lost node 1 (b)"}});
  job = recent.job_json();
  REQUIRE(node_named(job, "b", "lost"));
  CHECK((*node_named(job, "b", "lost"))["detail"] == "lost node 1 (b)");

  recent.add(rendezvous(1, 4, {"a", "c"}));
  recent.add({{"event", "rescale"}, {"change", "spare"}});
  recent.add({{"event", "worker_start"}, {"attempt", 1}, {"rank", 0}});
  job = recent.job_json();
  CHECK(job["attempt"] == 1);
  CHECK(node_named(job, "c", "running"));
  CHECK_FALSE(node_named(job, "c", "spare"));  // the spare came in
  REQUIRE(node_named(job, "b", "lost"));       // the lost node stays listed
  CHECK((*node_named(job, "b", "lost"))["node_rank"].is_null());

  recent.add({{"event", "summary"}, {"exit_code", 0}});
  CHECK(recent.job_json()["state"] == "succeeded");
}

TEST_CASE("the digest: a hang, an exclusion, a failed end") {
  RecentEvents recent;
  recent.add(rendezvous(0, 4, {"a", "b"}));
  recent.add({{"event", "hang"}, {"source", "heartbeat"}});
  CHECK(recent.job_json()["state"] == "hung");
  recent.add({{"event", "excluded"}, {"node_rank", 1}, {"reason", "node_failure_limit"}});
  CHECK(node_named(recent.job_json(), "b", "excluded"));
  recent.add({{"event", "summary"}, {"exit_code", 75}, {"job_root_cause", "node 0 (a): hung"}});
  auto job = recent.job_json();
  CHECK(job["state"] == "failed");
  CHECK(job["exit_code"] == 75);
  CHECK(job["root_cause"] == "node 0 (a): hung");
}

TEST_CASE("a failed end on one node: the root cause is the failure summary's") {
  RecentEvents recent;
  recent.add({{"event", "summary"},
              {"exit_code", 1},
              {"attempts",
               {{{"attempt", 0},
                 {"root_cause_rank", 1},
                 {"workers",
                  {{{"rank", 0}, {"local_rank", 0}, {"signal", "SIGTERM"}},
                   {{"rank", 1},
                    {"local_rank", 1},
                    {"exit_code", 1},
                    {"error_message", "ValueError: bad batch\nsecond line"}}}}}}}});
  auto job = recent.job_json();
  CHECK(job["state"] == "failed");
  CHECK(job["root_cause"] ==
        "rank 1 (local rank 1, attempt 0) exited with code 1: ValueError: bad batch");
  RecentEvents killed;
  killed.add(
      {{"event", "summary"},
       {"exit_code", 137},
       {"attempts",
        {{{"attempt", 2},
          {"root_cause_rank", 0},
          {"workers",
           {{{"rank", 0}, {"local_rank", 0}, {"signal", "SIGKILL"}, {"oom_killed", true}}}}}}}});
  CHECK(killed.job_json()["root_cause"] ==
        "rank 0 (local rank 0, attempt 2) was killed by SIGKILL (out of memory)");
}

TEST_CASE("the node list is bounded") {
  RecentEvents recent;
  for (int i = 0; i < 1000; ++i) recent.add({{"event", "spare"}, {"node", std::to_string(i)}});
  CHECK(recent.job_json()["nodes"].size() <= 64);
}
