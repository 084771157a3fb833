#include <doctest/doctest.h>

#include "rendezvous/rank_assignment.hpp"

using namespace ddp::rdzv;
using namespace std::chrono_literals;

namespace {
JoinRequest join(std::int64_t seq, std::string name, int lws, int rank = -1) {
  return JoinRequest{seq, std::move(name), lws, rank, {}};
}
}  // namespace

TEST_CASE("ranks are contiguous per node in node-rank order, local sizes may differ") {
  // Static: arrival order 2, 0, 1 must not matter.
  auto a = assign_ranks({join(1, "c", 3, 2), join(2, "a", 2, 0), join(3, "b", 1, 1)});
  REQUIRE(a.nodes.size() == 3);
  CHECK(a.world_size == 6);
  CHECK(a.nodes[0].name == "a");
  CHECK(a.nodes[0].base_rank == 0);
  CHECK(a.nodes[1].name == "b");
  CHECK(a.nodes[1].base_rank == 2);
  CHECK(a.nodes[2].name == "c");
  CHECK(a.nodes[2].base_rank == 3);
  // Dynamic: node ranks follow arrival order.
  auto d = assign_ranks({join(2, "y", 4), join(1, "x", 1)});
  CHECK(d.nodes[0].name == "x");
  CHECK(d.nodes[1].node_rank == 1);
  CHECK(d.nodes[1].base_rank == 1);
}

TEST_CASE("join and assignment records round-trip; garbage is rejected") {
  JoinRequest j{7, "host-a", 8, 1, {{"--max_restarts", "1"}, {"--role", "trainer"}}};
  auto back = decode_join(encode_join(j));
  REQUIRE(back);
  CHECK(back->seq == 7);
  CHECK(back->name == "host-a");
  CHECK(back->requested_node_rank == 1);
  CHECK(back->settings == j.settings);  // in order
  CHECK(back->previous_node_rank == -1);
  j.previous_node_rank = 2;  // a restart's join
  CHECK(decode_join(encode_join(j))->previous_node_rank == 2);
  // A join without the field (a first round's, or an older agent's) is not a restart's.
  CHECK(decode_join(R"({"seq":1,"name":"a","local_world_size":1,"node_rank":-1,"settings":[]})")
            ->previous_node_rank == -1);
  CHECK_FALSE(decode_join(
      R"({"seq":1,"name":"a","local_world_size":1,"node_rank":-1,"settings":[],"previous_node_rank":"x"})"));
  CHECK_FALSE(decode_join("{not json"));
  CHECK_FALSE(decode_join("{\"seq\": 1}"));
  auto a = assign_ranks({join(1, "a", 2, 0), join(2, "b", 3, 1)});
  auto a2 = decode_assignment(encode_assignment(a));
  REQUIRE(a2);
  CHECK(a2->world_size == 5);
  CHECK(a2->nodes[1].base_rank == 2);
  CHECK_FALSE(decode_assignment("[]"));
}

TEST_CASE("settings comparison names the setting, both values and both nodes") {
  const AgreedSettings leader{{"--max_restarts", "1"}, {"--role", "default"}};
  CHECK_FALSE(settings_mismatch(leader, "node 0 (a)", leader, "node 1 (b)"));
  auto differ = settings_mismatch(leader, "node 0 (a)",
                                  {{"--max_restarts", "0"}, {"--role", "default"}}, "node 1 (b)");
  REQUIRE(differ);
  CHECK(*differ == "--max_restarts differs between nodes: 1 on node 0 (a) but 0 on node 1 (b)");
  auto missing = settings_mismatch(leader, "L", {{"--max_restarts", "1"}}, "J");
  REQUIRE(missing);
  CHECK(*missing == "--role differs between nodes: default on L but (not set) on J");
  auto extra = settings_mismatch({{"--max_restarts", "1"}}, "L", leader, "J");
  REQUIRE(extra);
  CHECK(*extra == "--role differs between nodes: (not set) on L but default on J");
}

TEST_CASE("admission: static ranks, duplicates and out-of-range refused") {
  Admission adm({2, 2, true, {}, "a", "job", 0ms});
  const auto now = RdzvClock::now();
  CHECK(adm.offer(join(1, "a", 1, 0), now).admitted);
  CHECK_FALSE(adm.complete(now));
  CHECK(adm.describe().find("missing node rank(s): 1") != std::string::npos);
  auto dup = adm.offer(join(2, "evil", 1, 0), now);
  CHECK_FALSE(dup.admitted);
  CHECK(dup.reason.find("node rank 0 already joined from a") != std::string::npos);
  CHECK_FALSE(adm.offer(join(3, "x", 1, 5), now).admitted);
  CHECK_FALSE(adm.offer(join(4, "dyn", 1, -1), now).admitted);
  CHECK(adm.offer(join(5, "b", 4, 1), now).admitted);
  CHECK(adm.complete(now));
  CHECK_FALSE(adm.offer(join(6, "late", 1, 1), now).admitted);
}

TEST_CASE("admission: dynamic MIN:MAX closes at MAX, or at MIN after the last call") {
  const auto t0 = RdzvClock::now();
  Admission adm({2, 4, false, {}, "a", "job", 30s});
  CHECK(adm.offer(join(1, "a", 1), t0).admitted);
  CHECK_FALSE(adm.last_call_deadline());
  CHECK(adm.offer(join(2, "b", 1), t0 + 1s).admitted);
  CHECK(adm.last_call_deadline() == t0 + 31s);
  CHECK_FALSE(adm.complete(t0 + 30s));
  CHECK(adm.offer(join(3, "c", 1), t0 + 2s).admitted);
  CHECK(adm.complete(t0 + 31s));
  Admission full({1, 2, false, {}, "a", "job", 30s});
  full.offer(join(1, "a", 1), t0);
  full.offer(join(2, "b", 1), t0);
  CHECK(full.complete(t0));
  CHECK_FALSE(full.offer(join(3, "c", 1), t0).admitted);
}

TEST_CASE("admission: a node started with other settings ends the rendezvous") {
  Admission adm({1, 3, false, {{"--max_restarts", "1"}}, "leader-host (arrival #1)", "job", 1s});
  JoinRequest same = join(1, "leader-host", 1);
  same.settings = {{"--max_restarts", "1"}};
  CHECK(adm.offer(same, RdzvClock::now()).admitted);
  JoinRequest other = join(2, "b", 1);
  other.settings = {{"--max_restarts", "0"}};
  auto d = adm.offer(other, RdzvClock::now());
  CHECK_FALSE(d.admitted);
  CHECK(d.fatal);
  CHECK(d.reason ==
        "--max_restarts differs between nodes: 1 on leader-host (arrival #1) but 0 on b (arrival "
        "#2)");
}
