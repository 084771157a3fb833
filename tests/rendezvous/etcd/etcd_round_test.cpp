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
