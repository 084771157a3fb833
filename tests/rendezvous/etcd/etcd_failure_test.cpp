// The etcd client's pure decisions: which reply means "try another member" (by HTTP status and
// the gateway's gRPC code, not etcd's words), when an agent fences itself (etcd's lease
// semantics, fake clock), and the members' addresses (IPv6 in brackets).
#include <doctest/doctest.h>

#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_failure.hpp"
#include "rendezvous/etcd/etcd_lease_fence.hpp"

using namespace ddp::rdzv::etcd;
using namespace std::chrono_literals;
using Kind = ReplyVerdict::Kind;

TEST_CASE("a member's reply is classified by its HTTP status and gRPC code") {
  CHECK(classify_reply(200, R"({"header":{"revision":"3"}})").kind == Kind::Answer);
  // A proxy or a sick member: another member may answer.
  for (unsigned status : {500u, 502u, 503u, 504u, 429u, 404u, 400u}) {
    const auto v = classify_reply(status, "<html>Bad Gateway</html>");
    CHECK(v.kind == Kind::NextMember);
    CHECK_FALSE(v.etcd_answered);
    CHECK(v.line.find(std::to_string(status)) != std::string::npos);
  }
  CHECK(classify_reply(404, "404 page not found").line.find("not etcd's v3 JSON gateway") !=
        std::string::npos);
  const auto html = classify_reply(200, "<html>It works!</html>");
  CHECK(html.kind == Kind::NextMember);
  CHECK(html.line.find("not JSON") != std::string::npos);
  // JSON from another service (breaker F3: it was taken for etcd's answer, "a lease without an
  // ID", exit 69 or 74 although the other members were fine); a stream's answer under "result".
  const auto stranger = classify_reply(200, R"({"hello":"world"})");
  CHECK(stranger.kind == Kind::NextMember);
  CHECK(stranger.line.find("not etcd's v3 JSON gateway") != std::string::npos);
  CHECK(classify_reply(200, R"({"result":{"header":{"revision":"3"},"ID":"7"}})").kind ==
        Kind::Answer);
  CHECK(classify_reply(200, R"({"result":{"ID":"7"}})").kind == Kind::NextMember);
  // etcd's own "not now": Unavailable, DeadlineExceeded, ResourceExhausted, in any words.
  for (int code : {14, 4, 8}) {
    const auto v = classify_reply(
        503, R"({"error":"x","code":)" + std::to_string(code) + R"(,"message":"anything at all"})");
    CHECK(v.kind == Kind::NextMember);
    CHECK(v.etcd_answered);
    CHECK(v.grpc_code == code);
  }
  // A stream's error shape, inside a 200.
  const auto stream = classify_reply(
      200, R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader"}})");
  CHECK(stream.kind == Kind::NextMember);
  CHECK(stream.line.find("gRPC 14 Unavailable") != std::string::npos);
  // etcd's final answers, even where the words suggest otherwise ("leader" in the message).
  const auto refused =
      classify_reply(400, R"({"error":"x","code":3,"message":"the leader says: bad request"})");
  CHECK(refused.kind == Kind::Refused);
  CHECK(refused.grpc_code == 3);
  CHECK(classify_reply(404, R"({"error":"x","code":5,"message":"lease not found"})").kind ==
        Kind::Refused);
}

TEST_CASE("the fence follows etcd's lease semantics") {
  const auto t0 = LeaseFence::Clock::time_point{} + 100s;
  SUBCASE("time without a leader does not count against the TTL") {
    LeaseFence fence(2s, t0);
    // An election longer than the TTL: members answer "no leader" (or hang while waiting).
    CHECK_FALSE(fence.note(LeaseFence::Outcome::NotRenewed, t0 + 1s));
    CHECK_FALSE(fence.note(LeaseFence::Outcome::NotRenewed, t0 + 3s));
    CHECK_FALSE(fence.note(LeaseFence::Outcome::NoAnswer, t0 + 4s));  // 1 s since an answer
    CHECK_FALSE(fence.note(LeaseFence::Outcome::Renewed, t0 + 5s));
    CHECK_FALSE(fence.note(LeaseFence::Outcome::NoAnswer, t0 + 6s));
  }
  SUBCASE("no member answering for the granted TTL fences") {
    LeaseFence fence(8s, t0);
    CHECK_FALSE(fence.note(LeaseFence::Outcome::NoAnswer, t0 + 7s));
    auto why = fence.note(LeaseFence::Outcome::NoAnswer, t0 + 8s, "A: Connection refused");
    REQUIRE(why);
    CHECK(why->find("no member of etcd answered for 8 s") != std::string::npos);
    CHECK(why->find("Connection refused") != std::string::npos);
  }
  SUBCASE("etcd saying the lease is gone fences at once") {
    LeaseFence fence(2s, t0);
    CHECK(fence.note(LeaseFence::Outcome::Gone, t0 + 100ms));
  }
  SUBCASE("a leaderless cluster is bounded: 3 x the TTL without a renewal") {
    LeaseFence fence(2s, t0);
    CHECK_FALSE(fence.note(LeaseFence::Outcome::NotRenewed, t0 + 5s));
    auto why = fence.note(LeaseFence::Outcome::NotRenewed, t0 + 6s);
    REQUIRE(why);
    CHECK(why->find("quorum lost") != std::string::npos);
  }
}

TEST_CASE("members: IPv6 addresses in brackets") {
  auto e = parse_endpoints("[::1]:2381,http://[fe80::1]:2,127.0.0.1:3,[::1],[::1]:4");
  REQUIRE(e.size() == 5);
  CHECK(e[0].host == "::1");
  CHECK(e[0].port == 2381);
  CHECK(e[1].host == "fe80::1");
  CHECK(e[2].name() == "127.0.0.1:3");
  CHECK(e[3].port == 2379);
  CHECK(e[4].host == "::1");
  CHECK(e[4].port == 4);
  CHECK(describe(e).substr(0, 26) == "[::1]:2381,[fe80::1]:2,127");
  CHECK_THROWS_AS(parse_endpoints("[::1:2379"), std::invalid_argument);
  CHECK_THROWS_AS(parse_endpoints("[::1]x2379"), std::invalid_argument);
  CHECK_THROWS_AS(parse_endpoints("[]:2379"), std::invalid_argument);
}
