// Multi-node rendezvous against a real StoreServer on 127.0.0.1: each "agent" is a thread with
// its own store connections, exactly as separate ddprun processes would be.

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "rendezvous/node_rendezvous.hpp"
#include "rendezvous/rank_assignment.hpp"
#include "rendezvous/store_client.hpp"
#include "rendezvous/token_auth.hpp"
#include "tests/rendezvous/test_server.hpp"

using namespace ddp::rdzv;
using namespace ddp::rdzv::test;
using namespace std::chrono_literals;

namespace {

NodeRendezvousOptions node(std::string name, int lws, int node_rank, int min_nodes, int max_nodes) {
  NodeRendezvousOptions o;
  o.run_id = "job";
  o.node_name = std::move(name);
  o.local_world_size = lws;
  o.node_rank = node_rank;
  o.min_nodes = min_nodes;
  o.max_nodes = max_nodes;
  o.join_timeout = 20s;
  o.last_call_timeout = 300ms;
  return o;
}

std::vector<std::future<RendezvousResult>> join_all(
    TestServer& server, const std::vector<NodeRendezvousOptions>& nodes) {
  std::vector<std::future<RendezvousResult>> out;
  out.reserve(nodes.size());
  for (const auto& n : nodes) {
    out.push_back(std::async(std::launch::async,
                             [&server, n] { return join_rendezvous(server.client_options(), n); }));
  }
  return out;
}

}  // namespace

TEST_CASE("static rendezvous: 3 nodes, heterogeneous local sizes, any arrival order") {
  TestServer server;
  auto futures =
      join_all(server, {node("c", 3, 2, 3, 3), node("a", 2, 0, 3, 3), node("b", 1, 1, 3, 3)});
  std::vector<RendezvousResult> results;
  results.reserve(futures.size());
  for (auto& f : futures) results.push_back(f.get());
  for (const auto& r : results) {
    CHECK(r.world_size == 6);
    CHECK(r.num_nodes == 3);
    CHECK(encode_assignment(r.assignment) ==
          encode_assignment(results[0].assignment));  // all agree
  }
  CHECK(results[0].node_rank == 2);
  CHECK(results[0].base_rank == 3);
  CHECK(results[1].node_rank == 0);
  CHECK(results[1].base_rank == 0);
  CHECK(results[2].node_rank == 1);
  CHECK(results[2].base_rank == 2);
  CHECK(results[2].local_world_size == 1);
}

TEST_CASE("dynamic rendezvous MIN:MAX starts with MIN nodes after the last call") {
  TestServer server;
  auto futures = join_all(server, {node("x", 2, -1, 2, 4), node("y", 1, -1, 2, 4)});
  auto r0 = futures[0].get();
  auto r1 = futures[1].get();
  CHECK(r0.num_nodes == 2);
  CHECK(r0.world_size == 3);
  CHECK(r0.node_rank != r1.node_rank);
  CHECK(r0.base_rank + r1.base_rank == (r0.node_rank == 0 ? 2 : 1));
  // A node arriving after the round closed is refused, not left hanging.
  auto late = node("late", 1, -1, 2, 4);
  try {
    join_rendezvous(server.client_options(), late);
    FAIL("late node admitted");
  } catch (const RendezvousError& e) {
    CHECK(std::string(e.what()).find("closed without admitting late") != std::string::npos);
  }
}

TEST_CASE("dynamic rendezvous closes at once when MAX nodes arrive") {
  TestServer server;
  std::vector<NodeRendezvousOptions> nodes;
  for (int i = 0; i < 4; ++i) {
    auto n = node(fmt::format("n{}", i), 1, -1, 1, 4);
    n.last_call_timeout = 60s;  // would dominate if MAX did not close the round
    nodes.push_back(n);
  }
  auto futures = join_all(server, nodes);
  std::set<int> ranks;
  for (auto& f : futures) {
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    ranks.insert(f.get().node_rank);
  }
  CHECK(ranks == std::set<int>{0, 1, 2, 3});
}

TEST_CASE("a stranger without the token is refused and logged; the job still forms") {
  TestServer server({}, std::make_shared<TokenAccessPolicy>("s3cret"));
  auto a = node("a", 1, 0, 2, 2);
  auto b = node("b", 1, 1, 2, 2);
  a.token = b.token = "s3cret";
  auto stranger = node("stranger", 1, 1, 2, 2);
  stranger.token = "guess";
  auto fa =
      std::async(std::launch::async, [&] { return join_rendezvous(server.client_options(), a); });
  server.stats_when([](const StoreServerStats& s) { return s.pending_waits >= 1; });
  try {
    join_rendezvous(server.client_options(), stranger);
    FAIL("stranger admitted");
  } catch (const RendezvousError& e) {
    CHECK(std::string(e.what()).find("wrong or missing rendezvous token") != std::string::npos);
  }
  auto without = node("anonymous", 1, 1, 2, 2);  // no token at all: the keys are out of reach
  CHECK_THROWS_AS(join_rendezvous(server.client_options(), without), StoreError);
  auto rb = join_rendezvous(server.client_options(), b);
  CHECK(fa.get().world_size == 2);
  CHECK(rb.node_rank == 1);
  const auto log = server.log();
  CHECK(std::any_of(log.begin(), log.end(), [](const std::string& l) {
    return l.find("wrong rendezvous token") != std::string::npos;
  }));
}

TEST_CASE("a node started with other settings ends every node's join at once, naming both") {
  TestServer server;
  auto a = node("alpha", 1, 0, 3, 3);
  auto b = node("beta", 1, 1, 3, 3);
  auto c = node("gamma", 1, 2, 3, 3);
  a.must_agree = c.must_agree = {{"--max_restarts", "1"}};
  b.must_agree = {{"--max_restarts", "0"}};
  a.join_timeout = b.join_timeout = c.join_timeout = 600s;  // the mismatch, not a timeout, ends it
  auto fc =
      std::async(std::launch::async, [&] { return join_rendezvous(server.client_options(), c); });
  auto fa =
      std::async(std::launch::async, [&] { return join_rendezvous(server.client_options(), a); });
  server.stats_when([](const StoreServerStats& s) { return s.pending_waits >= 2; });
  const std::string line =
      "--max_restarts differs between nodes: 1 on node 0 (alpha) but 0 on node 1 (beta)";
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const RendezvousError& e) {
      return std::string(e.what());
    }
    return std::string("joined");
  };
  const std::string from_b = message([&] { join_rendezvous(server.client_options(), b); });
  INFO(from_b);
  CHECK(from_b.find(line) != std::string::npos);
  CHECK(message([&] { fa.get(); }).find(line) != std::string::npos);
  CHECK(message([&] { fc.get(); }).find(line) != std::string::npos);
}

TEST_CASE("a node that never arrives: join_timeout names who came and who did not") {
  TestServer server;
  auto a = node("alpha", 1, 0, 3, 3);
  a.join_timeout = 500ms;
  auto b = node("beta", 1, 2, 3, 3);
  b.join_timeout = 2s;
  auto fb =
      std::async(std::launch::async, [&] { return join_rendezvous(server.client_options(), b); });
  try {
    join_rendezvous(server.client_options(), a);
    FAIL("rendezvous completed without node 1");
  } catch (const RendezvousError& e) {
    const std::string what = e.what();
    CHECK(what.find("timed out") != std::string::npos);
    CHECK(what.find("alpha (node 0)") != std::string::npos);
    CHECK(what.find("missing node rank(s): 1") != std::string::npos);
  }
  CHECK_THROWS_AS(fb.get(), RendezvousError);  // the others learn it too, no hang
}

TEST_CASE("two jobs on one store stay apart") {
  TestServer server;
  auto j1 = node("a", 1, 0, 1, 1);
  auto j2 = node("b", 5, 0, 1, 1);
  j2.run_id = "other";
  CHECK(join_rendezvous(server.client_options(), j1).world_size == 1);
  CHECK(join_rendezvous(server.client_options(), j2).world_size == 5);
}

TEST_CASE("heartbeats: a node that stops is reported; a stop broadcast reaches everyone") {
  TestServer server;
  auto futures = join_all(server, {node("a", 1, 0, 2, 2), node("b", 1, 1, 2, 2)});
  auto ra = futures[0].get();
  auto rb = futures[1].get();
  NodeMonitor::Options mo{50ms, 400ms};
  std::promise<NodeAssignment> lost;
  std::promise<std::string> stop_a;
  NodeMonitor::Callbacks cba;
  cba.on_node_lost = [&](const NodeAssignment& n) { lost.set_value(n); };
  cba.on_stop = [&](const std::string& reason) { stop_a.set_value(reason); };
  NodeMonitor ma(server.client_options(), node("a", 1, 0, 2, 2), ra, mo, cba);
  {
    NodeMonitor mb(server.client_options(), node("b", 1, 1, 2, 2), rb, mo, {});
    std::this_thread::sleep_for(200ms);
    CHECK(mb.broadcast_stop("node 1 (b): rank 1 exited with code 3") ==
          "node 1 (b): rank 1 exited with code 3");
    CHECK(mb.broadcast_stop("second reason") ==
          "node 1 (b): rank 1 exited with code 3");  // first wins
  }                                                  // b's agent is gone: no more heartbeats
  auto stop_future = stop_a.get_future();
  REQUIRE(stop_future.wait_for(5s) == std::future_status::ready);
  CHECK(stop_future.get() == "node 1 (b): rank 1 exited with code 3");
  auto lost_future = lost.get_future();
  REQUIRE(lost_future.wait_for(5s) == std::future_status::ready);
  auto n = lost_future.get();
  CHECK(n.node_rank == 1);
  CHECK(n.name == "b");
}

TEST_CASE("node progress: the record's format, and junk is not a record") {
  CHECK(encode_node_progress({}) == "0");
  CHECK(encode_node_progress({12, 345, true}) == "12 345");
  CHECK(encode_node_progress({3, -1, true}) == "3 -1");
  CHECK(decode_node_progress("12 345") == NodeProgress{12, 345, true});
  CHECK(decode_node_progress("0") == NodeProgress{});
  for (const char* junk : {"", " ", "x", "1 ", "1 x", "1 2 3", "12abc", " 1", "1 2 started",
                           "starting", " starting", "1 starting starting"})
    CHECK_FALSE(decode_node_progress(junk));
}

TEST_CASE("node progress: a node whose ranks have not all started says so") {
  // Until every live rank of a node showed progress, its record carries " starting"; the others
  // keep the startup timeout until no record does (docs/health.md, the hang verdict).
  CHECK(encode_node_progress({12, 345, false}) == "12 345 starting");
  CHECK(encode_node_progress({5, std::nullopt, false}) == "5 starting");
  CHECK(encode_node_progress({0, std::nullopt, false}) == "0");  // no progress: not started
  CHECK(decode_node_progress("12 345 starting") == NodeProgress{12, 345, false});
  CHECK(decode_node_progress("5 starting") == NodeProgress{5, std::nullopt, false});
  // An older node's record has no marker: started on its first progress, as before.
  CHECK(decode_node_progress("5") == NodeProgress{5, std::nullopt, true});
  CHECK(decode_node_progress("0")->all_started == false);
}

TEST_CASE("heartbeats carry each node's progress: a change elsewhere is reported, own is not") {
  TestServer server;
  auto futures = join_all(server, {node("a", 1, 0, 2, 2), node("b", 1, 1, 2, 2)});
  auto ra = futures[0].get();
  auto rb = futures[1].get();
  NodeMonitor::Options mo{30ms, 5s};
  std::atomic<std::int64_t> a_events{0};
  std::mutex m;
  std::vector<std::optional<std::int64_t>> a_heard;  // what node a heard of node b
  std::atomic<int> b_heard{0};
  NodeMonitor::Callbacks cba;
  cba.local_progress = [&] { return NodeProgress{a_events.load(), std::nullopt}; };
  std::atomic<bool> a_heard_started{false};  // b's all_started, as a last heard it
  cba.on_progress_elsewhere = [&](std::optional<std::int64_t> best, bool others_started) {
    std::lock_guard lock(m);
    a_heard_started = others_started;
    a_heard.push_back(best);
  };
  std::atomic<std::int64_t> b_events{0};
  std::atomic<std::int64_t> b_step{0};
  NodeMonitor::Callbacks cbb;
  std::atomic<bool> b_started{false};
  cbb.local_progress = [&] {
    return NodeProgress{b_events.load(), b_step.load(), b_started.load()};
  };
  cbb.on_progress_elsewhere = [&](std::optional<std::int64_t>, bool) { ++b_heard; };
  NodeMonitor ma(server.client_options(), node("a", 1, 0, 2, 2), ra, mo, cba);
  NodeMonitor mb(server.client_options(), node("b", 1, 1, 2, 2), rb, mo, cbb);
  auto heard_by_a = [&] {
    std::lock_guard lock(m);
    return a_heard;
  };
  auto until = [](auto pred) {
    for (int i = 0; i < 500 && !pred(); ++i) std::this_thread::sleep_for(10ms);
    return pred();
  };
  // b's record was "0 0" from its first heartbeat ("0" before): a hears that once.
  REQUIRE(until([&] { return !heard_by_a().empty(); }));
  b_events = 5;
  b_step = 17;
  REQUIRE(until([&] {
    auto h = heard_by_a();
    return !h.empty() && h.back() == std::optional<std::int64_t>(17);
  }));
  // Nothing changes on b: a hears nothing more; b never hears its own progress.
  const auto count = heard_by_a().size();
  std::this_thread::sleep_for(200ms);
  CHECK(heard_by_a().size() == count);
  CHECK(b_heard == 0);
  CHECK_FALSE(a_heard_started);  // "5 17 starting": b's slow ranks have not started
  b_events = 6;
  b_started = true;
  REQUIRE(until([&] { return a_heard_started.load(); }));
  a_events = 1;
  REQUIRE(until([&] { return b_heard == 1; }));
}

TEST_CASE("heartbeats: losing the store itself is reported") {
  auto server = std::make_unique<TestServer>();
  auto opts = server->client_options();
  auto futures = join_all(*server, {node("a", 1, 0, 1, 1)});
  auto ra = futures[0].get();
  std::promise<std::string> gone;
  NodeMonitor::Callbacks cb;
  cb.on_store_lost = [&](const std::string& e) { gone.set_value(e); };
  NodeMonitor m(opts, node("a", 1, 0, 1, 1), ra, NodeMonitor::Options{50ms, 300ms}, cb);
  server.reset();
  auto f = gone.get_future();
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  CHECK_FALSE(f.get().empty());
}

TEST_CASE(
    "end of a round: the exit barrier waits for every node, a stop ends it, leave waits for all") {
  TestServer server;
  auto futures = join_all(server, {node("a", 1, 0, 2, 2), node("b", 1, 1, 2, 2)});
  const RendezvousResult ra = futures[0].get();
  const RendezvousResult rb = futures[1].get();
  auto round = node("a", 1, 0, 2, 2);
  StoreClient a(server.client_options());
  StoreClient b(server.client_options());
  auto always = [] { return true; };

  // Node a arrives first and is still waiting when b arrives: both see AllDone.
  auto fa =
      std::async(std::launch::async, [&] { return exit_barrier(a, round, ra, 50ms, always); });
  server.stats_when([](const StoreServerStats& s) { return s.pending_waits >= 1; });
  CHECK(exit_barrier(b, round, rb, 50ms, always).end == ExitBarrierResult::End::AllDone);
  CHECK(fa.get().end == ExitBarrierResult::End::AllDone);

  // Next round: a stop broadcast ends a waiting barrier with the first reason.
  round.round = 1;
  auto fa1 =
      std::async(std::launch::async, [&] { return exit_barrier(a, round, ra, 50ms, always); });
  server.stats_when([](const StoreServerStats& s) { return s.pending_waits >= 1; });
  CHECK(broadcast_stop(b, round, "7|node 1 (b): rank 1 failed") == "7|node 1 (b): rank 1 failed");
  CHECK(broadcast_stop(b, round, "9|later") == "7|node 1 (b): rank 1 failed");  // first reason wins
  const auto stopped = fa1.get();
  CHECK(stopped.end == ExitBarrierResult::End::Stopped);
  CHECK(stopped.stop == "7|node 1 (b): rank 1 failed");

  // A barrier nobody else reaches ends when the caller stops wanting to wait.
  round.round = 2;
  std::atomic<int> asked{0};
  CHECK(exit_barrier(a, round, ra, 20ms, [&] { return ++asked < 3; }).end ==
        ExitBarrierResult::End::Cancelled);

  // Leave: the store's host waits until the other node left, bounded by the budget otherwise.
  auto host =
      std::async(std::launch::async, [&] { leave_round(a, round, ra, true, 20s, 50ms, always); });
  server.stats_when([](const StoreServerStats& s) { return s.pending_waits >= 1; });
  CHECK(host.wait_for(0ms) == std::future_status::timeout);
  leave_round(b, round, rb, false, 20s, 50ms, always);
  CHECK(host.wait_for(10s) == std::future_status::ready);
  round.round = 3;
  leave_round(a, round, ra, true, 100ms, 50ms,
              always);  // b never leaves round 3: returns after 100 ms
}

TEST_CASE(
    "between attempts node 0 clears the workers' keys and keeps ddprun's; the others wait for it") {
  TestServer server;
  StoreClient worker(server.client_options());
  // What torch 2.x workers leave behind: init keys with no attempt in them.
  worker.set("default_pg/0//cpu//0/rank_0", "127.0.0.1:4242");
  worker.set("my/user/key", "x");
  auto round0 = join_all(server, {node("a", 1, 0, 2, 2), node("b", 1, 1, 2, 2)});
  for (auto& f : round0) f.get();
  StoreClient agent(server.client_options());
  const auto ours_before = agent.list_keys().size() - 2;
  CHECK(ours_before > 0);
  CHECK(is_worker_key("default_pg/0//cpu//0/rank_0"));
  CHECK_FALSE(is_worker_key("ddprun/job/0/assignment"));

  auto a = node("a", 1, 0, 2, 2), b = node("b", 1, 1, 2, 2);
  a.round = b.round = 1;
  auto round1 = join_all(server, {a, b});
  auto joined_a = round1[0].get(), joined_b = round1[1].get();
  // Node 1 comes first and must not go on before node 0 has cleared.
  auto waiting = std::async(std::launch::async, [&] {
    StoreClient c(server.client_options());
    clear_previous_attempt(c, b, joined_b, 10s);
    return c.check({"default_pg/0//cpu//0/rank_0"});
  });
  CHECK(waiting.wait_for(200ms) == std::future_status::timeout);
  clear_previous_attempt(agent, a, joined_a, 10s);
  CHECK_FALSE(waiting.get());  // by the time node 1 goes on, the stale address is gone
  CHECK_FALSE(agent.check({"my/user/key"}));
  for (const auto& key : agent.list_keys()) CHECK_FALSE(is_worker_key(key));
  CHECK(agent.get("ddprun/job/1/workers_cleared") == "2");

  // Round 0 clears nothing (another job's or a user's keys on a shared store stay).
  worker.set("default_pg/0//cpu//0/rank_0", "127.0.0.1:4243");
  clear_previous_attempt(agent, node("a", 1, 0, 2, 2), joined_a, 1s);
  CHECK(agent.check({"default_pg/0//cpu//0/rank_0"}));
}

TEST_CASE("between attempts: node 0 never clearing ends the wait with a named error") {
  TestServer server;
  auto o = node("b", 1, 1, 2, 2);
  o.round = 1;
  RendezvousResult joined;
  joined.node_rank = 1;
  StoreClient c(server.client_options());
  CHECK_THROWS_WITH_AS(clear_previous_attempt(c, o, joined, 200ms),
                       doctest::Contains("node 0 did not clear the previous attempt's worker keys"),
                       RendezvousError);
}

TEST_CASE("a late node of an elastic job waits as pending, is seen live and joins when invited") {
  TestServer server;
  auto futures = join_all(server, {node("a", 1, -1, 2, 3), node("b", 1, -1, 2, 3)});
  auto ra = futures[0].get();
  auto rb = futures[1].get();
  const auto& r0 = ra.node_rank == 0 ? ra : rb;
  auto late = node("late", 2, -1, 2, 3);
  late.may_wait_pending = true;
  late.pending_heartbeat = 20ms;
  std::promise<void> waiting;
  late.on_waiting = [&](const std::string& role) {
    if (role == "pending") waiting.set_value();
  };
  auto joined_late = std::async(std::launch::async,
                                [&] { return join_rendezvous(server.client_options(), late); });
  REQUIRE(waiting.get_future().wait_for(10s) == std::future_status::ready);
  std::promise<std::vector<JoinRequest>> seen;
  bool reported = false;
  NodeMonitor::Callbacks cb;
  cb.on_pending = [&](const std::vector<JoinRequest>& p) {
    if (!reported && !p.empty()) {
      reported = true;
      seen.set_value(p);
    }
  };
  {
    NodeMonitor m(server.client_options(), node("a", 1, -1, 2, 3), r0,
                  NodeMonitor::Options{30ms, 1s}, cb);
    auto f = seen.get_future();
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    auto pending = f.get();
    REQUIRE(pending.size() == 1);
    CHECK(pending[0].name == "late");
    CHECK(pending[0].local_world_size == 2);
    StoreClient control(server.client_options());
    invite_pending(control, "job", pending[0].seq, 1, 3, 2);
  }
  // The old nodes join round 1 pinned (as a re-form does), publishing the job's budgets.
  std::vector<NodeRendezvousOptions> old;
  for (int rank : {0, 1}) {
    auto n = node(rank == 0 ? "a" : "b", 1, rank, 3, 3);
    n.round = 1;
    n.restarts_used = 2;
    n.rescales_used = 1;
    old.push_back(n);
  }
  auto reform = join_all(server, old);
  REQUIRE(joined_late.wait_for(10s) == std::future_status::ready);
  auto r = joined_late.get();
  CHECK(r.round == 1);
  CHECK(r.node_rank == 2);
  CHECK(r.num_nodes == 3);
  CHECK(r.world_size == 4);
  CHECK(r.base_rank == 2);
  CHECK(r.restarts_used == 2);
  CHECK(r.rescales_used == 1);
  for (auto& f : reform) CHECK(f.get().num_nodes == 3);
}

TEST_CASE("a pending node reads the job's budgets for the round it is invited to, writes none") {
  // It counted a restart whose round went on without it (the running nodes gave that one back as
  // a rescale). Had it published its figures for the round it was invited to, the last writer
  // would have set the job's count for every node.
  TestServer server;
  auto futures = join_all(server, {node("a", 1, -1, 2, 3), node("b", 1, -1, 2, 3)});
  auto ra = futures[0].get();
  auto rb = futures[1].get();
  const auto& r0 = ra.node_rank == 0 ? ra : rb;
  auto late = node("late", 1, -1, 2, 3);
  late.may_wait_pending = true;
  late.pending_heartbeat = 20ms;
  late.restarts_used = 5;
  late.rescales_used = 0;
  std::promise<void> waiting;
  late.on_waiting = [&](const std::string& role) {
    if (role == "pending") waiting.set_value();
  };
  auto joined_late = std::async(std::launch::async,
                                [&] { return join_rendezvous(server.client_options(), late); });
  REQUIRE(waiting.get_future().wait_for(10s) == std::future_status::ready);
  std::promise<std::int64_t> seen;
  bool reported = false;
  NodeMonitor::Callbacks cb;
  cb.on_pending = [&](const std::vector<JoinRequest>& p) {
    if (!reported && !p.empty()) {
      reported = true;
      seen.set_value(p[0].seq);
    }
  };
  std::int64_t seq = 0;
  {
    NodeMonitor m(server.client_options(), node("a", 1, -1, 2, 3), r0,
                  NodeMonitor::Options{30ms, 1s}, cb);
    auto f = seen.get_future();
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    seq = f.get();
  }
  std::vector<NodeRendezvousOptions> old;
  for (int rank : {0, 1}) {
    auto n = node(rank == 0 ? "a" : "b", 1, rank, 3, 3);
    n.round = 1;
    n.restarts_used = 2;
    n.rescales_used = 1;
    old.push_back(n);
  }
  auto reform = join_all(server, old);
  // Both running nodes have published (each does before it arrives) before the invitation goes
  // out: the late node comes last, so a figure it wrote would be the one every node reads.
  StoreClient control(server.client_options());
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (control.add("ddprun/job/1/arrivals", 0) < 2 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  REQUIRE(control.get("ddprun/job/counts/1") == "2|1");
  invite_pending(control, "job", seq, 1, 3, 2);
  REQUIRE(joined_late.wait_for(10s) == std::future_status::ready);
  auto r = joined_late.get();
  CHECK(r.was_pending);
  CHECK(r.restarts_used == 2);
  CHECK(r.rescales_used == 1);
  for (auto& f : reform) {
    auto o = f.get();
    CHECK_FALSE(o.was_pending);
    CHECK(o.restarts_used == 2);
  }
  CHECK(control.get("ddprun/job/counts/1") == "2|1");
}

TEST_CASE("a pending node is told it is a spare, and a refusal ends its wait with the reason") {
  TestServer server;
  auto futures = join_all(server, {node("a", 1, -1, 1, 1)});
  futures[0].get();
  auto late = node("late", 1, -1, 1, 1);
  late.may_wait_pending = true;
  late.pending_heartbeat = 20ms;
  std::promise<void> spare;
  late.on_waiting = [&](const std::string& role) {
    if (role == "spare") spare.set_value();
  };
  auto joined_late = std::async(std::launch::async,
                                [&] { return join_rendezvous(server.client_options(), late); });
  StoreClient control(server.client_options());
  // Pending number 1: the first late arrival of this run.
  for (int i = 0; i < 200 && !control.check({"ddprun/job/pending/1"}); ++i)
    std::this_thread::sleep_for(20ms);
  mark_spare(control, "job", 1);
  REQUIRE(spare.get_future().wait_for(10s) == std::future_status::ready);
  refuse_pending(control, "job", 1, "the job ended before it needed this node");
  try {
    joined_late.get();
    FAIL("refused node admitted");
  } catch (const RendezvousError& e) {
    CHECK(std::string(e.what()).find("the job ended before it needed this node") !=
          std::string::npos);
  }
}

TEST_CASE("--exclude-hosts: the leader refuses a join from an excluded host") {
  TestServer server;
  auto a = node("a", 1, -1, 1, 2);
  a.excluded_hosts = {"bad"};
  a.last_call_timeout = 2s;
  auto bad = node("bad", 1, -1, 1, 2);
  auto first =
      std::async(std::launch::async, [&] { return join_rendezvous(server.client_options(), a); });
  std::this_thread::sleep_for(100ms);  // a leads
  try {
    join_rendezvous(server.client_options(), bad);
    FAIL("excluded host admitted");
  } catch (const RendezvousError& e) {
    CHECK(std::string(e.what()).find("host 'bad' is excluded from this job (--exclude-hosts)") !=
          std::string::npos);
  }
  CHECK(first.get().num_nodes == 1);
}

namespace {

/// Round 0 of nodes a, b, c (node ranks 0, 1, 2), each with its heartbeat monitor running.
struct FormedRound {
  explicit FormedRound(TestServer& server) {
    auto futures =
        join_all(server, {node("a", 1, 0, 3, 3), node("b", 1, 1, 3, 3), node("c", 1, 2, 3, 3)});
    const char* names[] = {"a", "b", "c"};
    for (int r = 0; r < 3; ++r) {
      monitors.push_back(std::make_unique<NodeMonitor>(
          server.client_options(), node(names[r], 1, r, 3, 3), futures[r].get(),
          NodeMonitor::Options{50ms, 10s}, NodeMonitor::Callbacks{}));
    }
  }
  std::vector<std::unique_ptr<NodeMonitor>> monitors;
};

/// How survivor `name` joins the re-form of round 0 as `rank` of the survivors `previous`.
NodeRendezvousOptions survivor(std::string name, int rank, std::vector<int> previous) {
  auto o = node(std::move(name), 1, rank, static_cast<int>(previous.size()),
                static_cast<int>(previous.size()));
  o.round = 1;
  o.join_timeout = 60s;  // a failure must come from the survivor watch, not from this
  o.previous_round = 0;
  o.survivors_previous_ranks = std::move(previous);
  o.survivor_heartbeat_timeout = 300ms;
  return o;
}

}  // namespace

TEST_CASE(
    "a re-form fails at once, naming it, when a survivor's heartbeat in the old round stops") {
  // Node 1 is lost and reported; node 2 died in the same event but its loss was not reported
  // before the re-form began, so it is still listed as a survivor.
  TestServer server;
  FormedRound old(server);
  old.monitors[1].reset();
  old.monitors[2].reset();
  old.monitors[0].reset();  // node 0 starts to join
  try {
    join_rendezvous(server.client_options(), survivor("a", 0, {0, 2}));
    FAIL("the re-form formed without node 2");
  } catch (const RendezvousError& e) {
    const std::string what = e.what();
    CHECK(what.find("node 2 (c) of the round left did not rejoin") != std::string::npos);
    CHECK(what.find("timed out") == std::string::npos);
  }
}

TEST_CASE("a re-form waits for a survivor that still heartbeats while it stops its workers") {
  TestServer server;
  FormedRound old(server);
  old.monitors[2].reset();  // the lost node
  old.monitors[0].reset();
  auto slow = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(1500ms);  // 5 x the survivor timeout, beating all along
    old.monitors[1].reset();
    return join_rendezvous(server.client_options(), survivor("b", 1, {0, 1}));
  });
  const auto leader = join_rendezvous(server.client_options(), survivor("a", 0, {0, 1}));
  CHECK(leader.num_nodes == 2);
  CHECK(slow.get().node_rank == 1);
}

namespace {

/// How node `name`, node rank `old_rank` of round 0 (of 3 nodes), joins the restart's round 1.
NodeRendezvousOptions restarting(std::string name, int old_rank, int min_nodes) {
  auto o = node(std::move(name), 1, -1, min_nodes, 3);
  o.round = 1;
  o.join_timeout = 60s;  // a failure must come from the watch of the round left, not from this
  o.previous_round = 0;
  o.previous_node_rank = old_rank;
  o.previous_round_nodes = 3;
  o.survivor_heartbeat_timeout = 300ms;
  return o;
}

}  // namespace

TEST_CASE("a restart ends at once, as a loss, when too few of the round left still heartbeat") {
  // Nodes 1 and 2 lost the store and left while node 0 was stopped; node 0 restarts alone.
  TestServer server;
  FormedRound old(server);
  old.monitors[1].reset();
  old.monitors[2].reset();
  old.monitors[0].reset();
  const auto started = std::chrono::steady_clock::now();
  try {
    join_rendezvous(server.client_options(), restarting("a", 0, 2));
    FAIL("the restart formed with one node of a 2:3 job");
  } catch (const RoundMembersLostError& e) {
    const std::string what = e.what();
    CHECK(what.find("lost nodes 1 (b), 2 (c) while the job restarted") != std::string::npos);
    CHECK(what.find("1 node can meet, fewer than the minimum of 2") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - started < 10s);  // not join_timeout (60 s)
}

TEST_CASE("a restart forms without a lost node when the others make the minimum") {
  TestServer server;
  FormedRound old(server);
  old.monitors[2].reset();  // lost
  old.monitors[0].reset();
  auto slow = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(1500ms);  // 5 x the watch's timeout, beating all along
    old.monitors[1].reset();
    return join_rendezvous(server.client_options(), restarting("b", 1, 2));
  });
  const auto leader = join_rendezvous(server.client_options(), restarting("a", 0, 2));
  CHECK(leader.num_nodes == 2);
  CHECK(slow.get().num_nodes == 2);
}

TEST_CASE("every node of a restart that cannot form hears the loss, not a failed join") {
  TestServer server;
  FormedRound old(server);
  old.monitors[2].reset();  // lost; the 3:3 job cannot restart without it
  old.monitors[0].reset();
  old.monitors[1].reset();
  auto first = std::async(std::launch::async, [&] {
    return join_rendezvous(server.client_options(), restarting("a", 0, 3));
  });
  std::this_thread::sleep_for(100ms);  // a leads
  auto second = std::async(std::launch::async, [&] {
    return join_rendezvous(server.client_options(), restarting("b", 1, 3));
  });
  for (auto* f : {&first, &second}) {
    try {
      f->get();
      FAIL("the restart formed without node 2");
    } catch (const RoundMembersLostError& e) {
      CHECK(std::string(e.what()).find("lost node 2 (c) while the job restarted") !=
            std::string::npos);
    }
  }
}

TEST_CASE("a restart's node hears, as a loss, that its leader stopped before answering") {
  // Node 0 took the first arrival of the restart (so it leads) and was killed before it led:
  // its join is there, its beat never comes. Without the leader's beat, node 1 waited out
  // join_timeout (60 s here) for an answer nobody would give.
  TestServer server;
  FormedRound old(server);
  old.monitors[0].reset();
  old.monitors[1].reset();
  StoreClient dead_leader(server.client_options());
  REQUIRE(dead_leader.add("ddprun/job/1/arrivals", 1) == 1);
  JoinRequest join;
  join.seq = 1;
  join.name = "a";
  join.local_world_size = 1;
  join.requested_node_rank = -1;
  join.previous_node_rank = 0;
  dead_leader.set("ddprun/job/1/join/1", encode_join(join));
  const auto started = std::chrono::steady_clock::now();
  try {
    join_rendezvous(server.client_options(), restarting("b", 1, 2));
    FAIL("the restart formed without its leader");
  } catch (const RoundMembersLostError& e) {
    CHECK(std::string(e.what()).find("lost the round's leader, node 0 (a) of the round left, "
                                     "while the job restarted") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - started < 10s);  // not join_timeout (60 s)
}

TEST_CASE("a restart's leader that waits long for a member still beating keeps the others") {
  // The leader waits 5 x the watch's timeout for node 2, which still heartbeats in the round
  // left; node 1, joined at once, must not take the wait for a dead leader.
  TestServer server;
  FormedRound old(server);
  old.monitors[0].reset();
  old.monitors[1].reset();
  auto leader = std::async(std::launch::async, [&] {
    return join_rendezvous(server.client_options(), restarting("a", 0, 3));
  });
  std::this_thread::sleep_for(100ms);  // a leads
  auto early = std::async(std::launch::async, [&] {
    return join_rendezvous(server.client_options(), restarting("b", 1, 3));
  });
  std::this_thread::sleep_for(1500ms);
  old.monitors[2].reset();
  const auto late = join_rendezvous(server.client_options(), restarting("c", 2, 3));
  CHECK(late.num_nodes == 3);
  CHECK(leader.get().num_nodes == 3);
  CHECK(early.get().num_nodes == 3);
}

TEST_CASE("a re-form's node hears, as a loss, that its leader died before it joined") {
  // Node 2 was lost; survivor 0 (the re-form's leader) died too before it joined, and its
  // heartbeat in the round left stood still. Node 1 waited out join_timeout without this.
  TestServer server;
  FormedRound old(server);
  old.monitors[2].reset();
  old.monitors[0].reset();
  old.monitors[1].reset();
  const auto started = std::chrono::steady_clock::now();
  try {
    join_rendezvous(server.client_options(), survivor("b", 1, {0, 1}));
    FAIL("the re-form formed without its leader");
  } catch (const RoundMembersLostError& e) {
    CHECK(std::string(e.what()).find("lost the round's leader, node 0 (a) of the round left, "
                                     "while the job re-formed") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - started < 10s);  // not join_timeout (60 s)
}

TEST_CASE("a re-form's node waits for a leader that still heartbeats while it stops its workers") {
  TestServer server;
  FormedRound old(server);
  old.monitors[2].reset();  // the lost node
  old.monitors[1].reset();
  auto early = std::async(std::launch::async, [&] {
    return join_rendezvous(server.client_options(), survivor("b", 1, {0, 1}));
  });
  std::this_thread::sleep_for(1500ms);  // 5 x the watch's timeout, the leader beating all along
  old.monitors[0].reset();
  const auto leader = join_rendezvous(server.client_options(), survivor("a", 0, {0, 1}));
  CHECK(leader.num_nodes == 2);
  CHECK(early.get().node_rank == 1);
}

TEST_CASE("default --rdzv_id: another program's fingerprint is a warning line, escaped") {
  TestServer server;
  StoreClient client(server.client_options());
  NodeRendezvousOptions first = node("a", 1, -1, 1, 2);
  first.run_id = "none";
  first.default_id_command = "x\x1b]0;T\a.py 00000000000000aa";
  CHECK_FALSE(default_id_mismatch(client, server.client_options(), first).has_value());  // records

  NodeRendezvousOptions renamed = first;  // the same content under another name: the same program
  renamed.default_id_command = "link.py 00000000000000aa";
  CHECK_FALSE(default_id_mismatch(client, server.client_options(), renamed).has_value());

  NodeRendezvousOptions other = first;  // another project's train.py
  other.default_id_command = "train.py 00000000000000bb";
  const auto warning = default_id_mismatch(client, server.client_options(), other);
  REQUIRE(warning.has_value());
  CHECK(warning->find("--rdzv_id") != std::string::npos);
  CHECK(warning->find("x\\x1b]0;T\\x07.py") != std::string::npos);  // control bytes escaped
  CHECK(warning->find('\x1b') == std::string::npos);
  CHECK(warning->find('\n') == std::string::npos);
  CHECK(warning->find("this one: train.py") != std::string::npos);
}
