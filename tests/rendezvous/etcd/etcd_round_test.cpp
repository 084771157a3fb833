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

// Issue 34, behaviour 4: a member Ctrl-C'd or killed while it waited stays listed in the open
// record; the next joiner must not fill (or close) the round around it.
TEST_CASE("a join drops the open round's members whose alive key is gone") {
  const RoundShape shape{2, 2};
  auto ghost = join_step(std::nullopt, member(7), shape, {}).next;
  REQUIRE(ghost.members.size() == 1);
  // Its lease ended: the next joiner replaces it instead of closing a round of two with it.
  auto step = join_step(ghost, member(8), shape, AliveKeys{});
  REQUIRE(step.kind == JoinStep::Kind::Write);
  CHECK(step.next.open);
  REQUIRE(step.next.members.size() == 1);
  CHECK(step.next.members[0].lease == 8);
  REQUIRE(step.dropped.size() == 1);
  CHECK(step.dropped[0].lease == 7);
  // With both alive the round closes with both, as before.
  auto closes = join_step(ghost, member(8), shape, AliveKeys{{7, 41}});
  CHECK_FALSE(closes.next.open);
  CHECK(closes.next.members.size() == 2);
  CHECK(closes.dropped.empty());
  // A member listed and alive has joined; listed with a dead peer, it writes the peer out.
  auto both_open = join_step(std::nullopt, member(1), RoundShape{1, 3}, {}).next;
  both_open = join_step(both_open, member(2), RoundShape{1, 3}, AliveKeys{{1, 5}}).next;
  CHECK(join_step(both_open, member(2), RoundShape{1, 3}, AliveKeys{{1, 5}, {2, 6}}).kind ==
        JoinStep::Kind::Joined);
  auto cleanup = join_step(both_open, member(2), RoundShape{1, 3}, AliveKeys{{2, 6}});
  CHECK(cleanup.kind == JoinStep::Kind::Write);
  CHECK(cleanup.next.members.size() == 1);
  // Listed without its own alive key (its lease ended and it has a new one, or a stranger
  // deleted the key): it is added again, at the end.
  auto again = join_step(both_open, member(1), RoundShape{1, 3}, AliveKeys{{2, 6}});
  REQUIRE(again.kind == JoinStep::Kind::Write);
  CHECK(again.next.members.back().lease == 1);
  CHECK(again.dropped.empty());
  // A closed round is never rewritten, dead members or not.
  auto closed = join_step(ghost, member(8), shape, AliveKeys{{7, 41}}).next;
  CHECK(join_step(closed, member(9), shape, AliveKeys{}).kind == JoinStep::Kind::Closed);
  CHECK(join_step(closed, member(8), shape, AliveKeys{}).kind == JoinStep::Kind::Joined);
}

TEST_CASE("a never-formed round of dead members takes the next joiner's shape") {
  // Finding 5: a first attempt (--nnodes 2) gave up alone; its record stayed, open, listing its
  // dead lease. A re-run with --nnodes 2:3 was refused ("the round expects 2:2 nodes").
  auto dead = join_step(std::nullopt, member(7), RoundShape{2, 2}, {}).next;
  auto step = join_step(dead, member(8), RoundShape{2, 3}, AliveKeys{});
  REQUIRE(step.kind == JoinStep::Kind::Write);
  CHECK(step.next.open);
  CHECK(step.next.min_nodes == 2);
  CHECK(step.next.max_nodes == 3);
  REQUIRE(step.next.members.size() == 1);
  CHECK(step.next.members[0].lease == 8);
  // A live member keeps the round's shape: a different one is still refused.
  CHECK(join_step(dead, member(8), RoundShape{2, 3}, AliveKeys{{7, 41}}).kind ==
        JoinStep::Kind::Refused);
}

TEST_CASE("a lost member's line names why its alive key went") {
  // Finding 8: every loss read "lease expired (no heartbeat for 3 s)", even for a node that left
  // (Ctrl-C: its lease revoked) or whose keys a cleanup deleted.
  CHECK(why_alive_gone(false, false) == AliveGone::Expired);
  CHECK(why_alive_gone(true, false) == AliveGone::Left);
  CHECK(why_alive_gone(false, true) == AliveGone::Deleted);
  CHECK(why_alive_gone(true, true) == AliveGone::Deleted);
  CHECK(alive_gone_text(1, "host-b", AliveGone::Expired, 3) ==
        "lost node 1 (host-b): its etcd lease expired (no heartbeat for 3 s, the lease's TTL)");
  const std::string left = alive_gone_text(1, "host-b", AliveGone::Left, 3);
  CHECK(left.find("it left") != std::string::npos);
  CHECK(left.find("heartbeat") == std::string::npos);
  const std::string deleted = alive_gone_text(1, "host-b", AliveGone::Deleted, 3);
  CHECK(deleted.find("deleted") != std::string::npos);
  CHECK(deleted.find("heartbeat") == std::string::npos);
  JobKeys keys("/ddprun", "j");
  CHECK(keys.left(2, 1) == "/ddprun/j/r2/left/1");
}

TEST_CASE("the round's txn compares every other listed member's alive key at its revision") {
  const JobKeys keys("/ddprun", "job");
  RoundRecord next;
  next.members = {member(1), member(2), member(3)};
  const auto compares = liveness_compares(keys, 4, next, AliveKeys{{1, 10}, {2, 11}}, 2);
  REQUIRE(compares.size() == 2);
  CHECK(compares[0].key == keys.alive(4, 1));
  CHECK(compares[0].target == Compare::Target::Mod);
  CHECK(compares[0].number == 10);
  // Listed without an alive key: a compare no key meets, so the txn cannot succeed.
  CHECK(compares[1].key == keys.alive(4, 3));
  CHECK(compares[1].number == -1);
}

TEST_CASE("alive keys parse to their leases; other keys are not members") {
  const JobKeys keys("/ddprun", "job");
  std::vector<KeyValue> kvs(4);
  kvs[0].key = keys.alive(0, 0xab);
  kvs[0].mod_revision = 9;
  kvs[1].key = keys.alive_prefix(0) + "zz";
  kvs[2].key = keys.alive_prefix(0);
  kvs[3].key = keys.store(0);
  const AliveKeys alive = alive_keys(kvs, keys.alive_prefix(0));
  CHECK(alive == AliveKeys{{0xab, 9}});
}

// Behaviour 8: a job re-run under the same id after it ended is a new generation.
TEST_CASE("a generation has ended when round 0 closed and nobody of it is alive") {
  RoundRecord open;
  RoundRecord closed;
  closed.open = false;
  CHECK_FALSE(generation_ended(std::nullopt, false));  // nothing yet: a fresh job
  CHECK_FALSE(generation_ended(open, false));          // forming: ghosts are dropped instead
  CHECK_FALSE(generation_ended(closed, true));         // running: a late node waits as pending
  CHECK(generation_ended(closed, false));
  CHECK(decode_generation(encode_generation(12)) == 12);
  CHECK_FALSE(decode_generation("-1"));
  CHECK_FALSE(decode_generation("3x"));
  CHECK_FALSE(decode_generation(""));
  // Generation 0 keeps the old layout; later ones live beside it, under the same id.
  const JobKeys zero("/ddprun/", "job");
  const JobKeys two("/ddprun", "job", 2);
  CHECK(zero.record(0) == "/ddprun/job/r0/record");
  CHECK(two.record(0) == "/ddprun/job/g2/r0/record");
  CHECK(two.generation_key() == "/ddprun/job/generation");
  CHECK(two.pending_prefix() == "/ddprun/job/g2/pending/");
}

// Behaviour 14: an id with '/' is one key segment, never a prefix of another job's keys.
TEST_CASE("job ids are encoded into one key segment") {
  CHECK(encode_job_id("job-1.a_b") == "job-1.a_b");
  CHECK(encode_job_id("team/exp1") == "team%2Fexp1");
  CHECK(encode_job_id("100%") == "100%25");
  CHECK(encode_job_id("a b") == "a%20b");
  const JobKeys team("/ddprun", "team");
  const JobKeys exp("/ddprun", "team/exp1");
  CHECK(exp.job() == "/ddprun/team%2Fexp1/");
  CHECK_FALSE(exp.job().starts_with(team.job()));
}

// Behaviour 7: the exit barrier knows who did not arrive, and who never will.
TEST_CASE("the exit barrier's verdict names who did not arrive, alive or gone") {
  RoundRecord closed;
  closed.open = false;
  closed.members = {member(1), member(2), member(3)};
  auto all = barrier_verdict(closed, {0, 1, 2}, AliveKeys{});
  CHECK(all.all_arrived);
  auto v = barrier_verdict(closed, {0}, AliveKeys{{2, 5}, {3, 6}});  // leases of nodes 1, 2
  CHECK_FALSE(v.all_arrived);
  CHECK(v.gone.empty());
  CHECK(v.waiting == "node 1 (host2), node 2 (host3)");
  auto lost = barrier_verdict(closed, {0}, AliveKeys{{2, 6}});
  CHECK(lost.gone == "node 2 (host3)");
  CHECK(lost.gone_count == 1);
  CHECK(lost.waiting == "node 1 (host2)");
  CHECK(lost.arrived_text == "node 0 (host1)");
}

// Behaviour 13: a waiting join's progress lines, paced as c10d's (every 3 s).
TEST_CASE("join progress: the first line after one interval, then one per interval") {
  using namespace std::chrono_literals;
  const auto t0 = ProgressPacer::Clock::time_point{} + 100s;
  ProgressPacer pacer(t0, 3s);
  CHECK_FALSE(pacer.due(t0));
  CHECK_FALSE(pacer.due(t0 + 2900ms));
  CHECK(pacer.due(t0 + 3100ms) == 3100ms);
  CHECK_FALSE(pacer.due(t0 + 4s));
  CHECK(pacer.due(t0 + 6200ms) == 6200ms);
  RoundShape shape{2, 2};
  auto one = join_step(std::nullopt, member(5), shape).next;
  CHECK(round_status(one, shape) == "1 of 2 node(s) arrived: host5");
  CHECK(round_status(std::nullopt, RoundShape{1, 3}) == "0 of 1..3 node(s) arrived: none");
  auto ranked = join_step(std::nullopt, member(6, 1), shape).next;
  CHECK(round_status(ranked, shape) ==
        "1 of 2 node(s) arrived: host6 (node 1); missing node rank(s): 0");
}
