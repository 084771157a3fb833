// The etcd rendezvous's pure half: the join step every agent takes on the record it read, the
// close of a round, rank order, and the token's seal.
#include <doctest/doctest.h>

#include "rendezvous/etcd/etcd_round.hpp"

using namespace ddp::rdzv::etcd;

namespace {
RoundMember member(std::int64_t lease, int asked = -1, int lws = 2) {
  return RoundMember{lease, "host" + std::to_string(lease), lws, asked, "s"};
}
}  // namespace

TEST_CASE("joins append in arrival order and the one that fills the round closes it") {
  RoundShape shape{2, 3};
  auto first = join_step(std::nullopt, member(10), shape);
  REQUIRE(first.kind == JoinStep::Kind::Write);
  CHECK(first.next.open);
  auto second = join_step(first.next, member(11), shape);
  auto third = join_step(second.next, member(12), shape);
  REQUIRE(third.kind == JoinStep::Kind::Write);
  CHECK_FALSE(third.next.open);
  CHECK(node_rank_of(third.next, 12) == 2);
  CHECK(join_step(third.next, member(13), shape).kind == JoinStep::Kind::Closed);
  CHECK(join_step(third.next, member(11), shape).kind == JoinStep::Kind::Joined);
  auto decoded = decode_round(encode_round(third.next));
  REQUIRE(decoded);
  CHECK(assignment_of(*decoded).world_size == 6);
  CHECK(assignment_of(*decoded).nodes[1].base_rank == 2);
}

TEST_CASE("static ranks: a taken rank and different settings are refused; order by rank") {
  RoundShape shape{3, 3};
  auto a = join_step(std::nullopt, member(1, 2), shape);
  CHECK(join_step(a.next, member(2, 2), shape).kind == JoinStep::Kind::Refused);
  RoundMember odd = member(3, 0);
  odd.settings = "other";
  CHECK(join_step(a.next, odd, shape).reason.find("settings differ") != std::string::npos);
  CHECK(join_step(a.next, member(4, 0), RoundShape{2, 3}).kind == JoinStep::Kind::Refused);
  auto b = join_step(a.next, member(5, 0), shape);
  auto c = join_step(b.next, member(6, 1), shape);
  CHECK_FALSE(c.next.open);
  CHECK(node_rank_of(c.next, 5) == 0);
  CHECK(node_rank_of(c.next, 6) == 1);
  CHECK(node_rank_of(c.next, 1) == 2);
}

TEST_CASE("close: only live members count; min_nodes only after the last call") {
  RoundShape shape{2, 4};
  auto r = join_step(std::nullopt, member(1), shape).next;
  r = join_step(r, member(2), shape).next;
  r = join_step(r, member(3), shape).next;
  CHECK_FALSE(close_step(r, {1, 2, 3}, false));
  auto closed = close_step(r, {1, 3}, true);
  REQUIRE(closed);
  CHECK(closed->members.size() == 2);
  CHECK(node_rank_of(*closed, 3) == 1);
  CHECK_FALSE(close_step(r, {1}, true));  // below min_nodes
}

TEST_CASE(
    "a round meeting again: the nodes of the round left whose leases ended, when too few remain") {
  // Round 0 of leases 1, 2, 3 (node ranks 0, 1, 2), closed.
  auto old = join_step(std::nullopt, member(1), RoundShape{2, 3}).next;
  old = join_step(old, member(2), RoundShape{2, 3}).next;
  old = join_step(old, member(3), RoundShape{2, 3}).next;
  REQUIRE_FALSE(old.open);
  const auto restart = join_step(std::nullopt, member(1), RoundShape{2, 3}).next;  // 1 came back
  // 2 and 3 ended (their leases, and with them their alive keys, are gone): 1 cannot meet 2:3.
  const auto lost = lost_before_forming(old, restart, {1}, 2);
  REQUIRE(lost);
  CHECK(*lost ==
        "lost nodes 1 (host2), 2 (host3) while the job met again: their etcd leases "
        "ended; 1 node can meet, fewer than the minimum of 2");
  // 3 still lives (stopping its workers, say): 1 and 3 can meet.
  CHECK_FALSE(lost_before_forming(old, restart, {1, 3}, 2));
  // Nobody lost: nothing to say even below the minimum (they may all come).
  CHECK_FALSE(lost_before_forming(old, restart, {1, 2, 3}, 3));
  // A member already in the new round counts whatever its lease in the old one says.
  auto both = join_step(restart, member(2), RoundShape{2, 3}).next;
  CHECK_FALSE(lost_before_forming(old, both, {1}, 2));  // only 3 lost; 1 and 2 meet
}

TEST_CASE("budgets: the highest the joiners published is kept") {
  auto r = join_step(std::nullopt, member(1), RoundShape{1, 3, 2, 1}).next;
  r = join_step(r, member(2), RoundShape{1, 3, -1, -1}).next;
  CHECK(r.restarts_used == 2);
  CHECK(r.rescales_used == 1);
}

TEST_CASE("the seal binds token, key and payload") {
  const std::string v = seal("secret", "/k", "payload");
  CHECK(unseal("secret", "/k", v) == "payload");
  CHECK_FALSE(unseal("other", "/k", v));
  CHECK_FALSE(unseal("secret", "/k2", v));           // replayed under another key
  CHECK_FALSE(unseal("secret", "/k", "-|payload"));  // a stranger's unsealed value
  CHECK(unseal("", "/k", seal("", "/k", "p|q")) == "p|q");
  CHECK_FALSE(unseal("", "/k", v));
  CHECK_FALSE(unseal("secret", "/k", "garbage"));
  CHECK_FALSE(decode_round("{}"));
}

TEST_CASE("invitations and refusals round-trip, malformed ones are refused") {
  const auto v = decode_pending_verdict(encode_invitation(Invitation{4, 3, 2}));
  REQUIRE(v);
  REQUIRE(v->invitation);
  CHECK(v->invitation->round == 4);
  CHECK(v->invitation->nodes == 3);
  CHECK(v->invitation->node_rank == 2);
  const auto restart = decode_pending_verdict(encode_invitation(Invitation{5, 0, 0}));
  REQUIRE(restart);
  CHECK(restart->invitation->nodes == 0);  // a restart's round, met as configured
  const auto refused = decode_pending_verdict(encode_refusal("settings differ"));
  REQUIRE(refused);
  CHECK_FALSE(refused->invitation);
  CHECK(refused->refused == "settings differ");
  for (const char* bad : {"", "1|2", "1|2|2", "1|2|-1", "-1|0|0", "a|b|c", "1|2|1|4", "1|2|1 "}) {
    CHECK_MESSAGE(!decode_pending_verdict(bad), bad);
  }
}

namespace {
ddp::rdzv::JoinRequest request(const std::string& name) {
  ddp::rdzv::JoinRequest j;
  j.name = name;
  j.local_world_size = 2;
  return j;
}
}  // namespace

TEST_CASE("the pending board: live requests in arrival order, answered and gone ones dropped") {
  const JobKeys keys("/ddprun", "job");
  PendingBoard board("tok", keys.pending_prefix());
  auto put = [&](const std::string& key, const std::string& payload, std::int64_t rev) {
    board.put(key, seal("tok", key, payload), rev);
  };
  put(keys.pending(0x30), encode_join(request("late-b")), 12);
  put(keys.pending(0x2f), encode_join(request("late-a")), 10);
  auto live = board.live();
  REQUIRE(live.size() == 2);
  CHECK(live[0].name == "late-a");  // arrival order (create revision), not lease order
  CHECK(live[0].seq == 0x2f);       // the lease is the pending number
  CHECK(live[1].seq == 0x30);
  // The same event twice (a read and a watch that overlap) changes nothing.
  put(keys.pending(0x2f), encode_join(request("late-a")), 10);
  CHECK(board.live().size() == 2);
  // A spare stays live (it waits); an invited or refused one is answered; a gone one is erased.
  put(keys.pending_spare(0x30), "1", 13);
  CHECK(board.live().size() == 2);
  put(keys.pending_invite(0x2f), encode_invitation(Invitation{1, 3, 2}), 14);
  REQUIRE(board.live().size() == 1);
  CHECK(board.live()[0].seq == 0x30);
  board.erase(keys.pending(0x30));
  CHECK(board.live().empty());
  // Strangers: an unsealed or wrongly sealed request, a key outside the prefix, a bad lease.
  board.put(keys.pending(0x40), "-|" + encode_join(request("stranger")), 20);
  board.put(keys.pending(0x41), seal("other", keys.pending(0x41), encode_join(request("x"))), 21);
  put("/ddprun/other-job/pending/42", encode_join(request("y")), 22);
  put(keys.pending_prefix() + "zz", encode_join(request("z")), 23);
  put(keys.pending_prefix() + "0", encode_join(request("z")), 24);
  put(keys.pending(0x43), "not a join request", 25);
  CHECK(board.live().empty());
  // An answer seen before its request (a watch replaying into a fresh read) still counts.
  put(keys.pending_invite(0x50), encode_refusal("no"), 30);
  put(keys.pending(0x50), encode_join(request("refused")), 29);
  CHECK(board.live().empty());
}

TEST_CASE("the pending board is bounded: a flood of requests keeps the newest") {
  const JobKeys keys("/ddprun", "job");
  PendingBoard board("", keys.pending_prefix());
  for (std::int64_t i = 1; i <= 1000; ++i) {
    board.put(keys.pending(i), seal("", keys.pending(i), encode_join(request("n"))), i);
  }
  const auto live = board.live();
  REQUIRE(live.size() == PendingBoard::kMaxPending);
  CHECK(live.front().seq == 1000 - static_cast<std::int64_t>(PendingBoard::kMaxPending) + 1);
  CHECK(live.back().seq == 1000);
}
