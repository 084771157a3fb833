// The token's pure parts: HMAC-SHA256 (OpenSSL) against reference values, challenges, and the
// store-side access policy driven against a real StoreModel (no sockets).
#include <doctest/doctest.h>

#include <set>

#include "rendezvous/codec.hpp"
#include "rendezvous/replication.hpp"
#include "rendezvous/token_auth.hpp"

using namespace ddp::rdzv;

namespace {
Command get(std::string key) { return Command{Op::Get, {std::move(key)}, {}, 0, 0}; }
std::string bytes_reply(std::string_view value) {
  std::string out;
  put_bytes(out, value);
  return out;
}
}  // namespace

TEST_CASE("HMAC-SHA256 matches reference values") {
  // Python: hmac.new(b"key", b"The quick brown fox jumps over the lazy dog", hashlib.sha256)
  CHECK(hmac_sha256_hex("key", "The quick brown fox jumps over the lazy dog") ==
        "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8");
  // A key longer than the block size, and the exact text a response covers.
  CHECK(challenge_response(std::string(100, 'k'), "00112233445566778899aabbccddeeff") ==
        "86daf7b84221bc89eab504750c4aedaae80549c39f6228a6a96909c709229728");
  CHECK(challenge_response("a", "c1") != challenge_response("b", "c1"));
  CHECK(challenge_response("a", "c1") != challenge_response("a", "c2"));
}

TEST_CASE("challenges are fresh 128-bit hex strings") {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string c = new_challenge();
    CHECK(c.size() == 32);
    CHECK(c.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(c);
  }
  CHECK(seen.size() == 1000);
  CHECK(same_secret("abc", "abc"));
  CHECK_FALSE(same_secret("abc", "abd"));
  CHECK_FALSE(same_secret("abc", "abcd"));
}

TEST_CASE("access policy: the rendezvous keys need the token; other keys stay open") {
  StoreModel model;
  Effects fx;
  model.set("/ddprun/job/0/stop", "1|x", fx);
  model.set("/worker/key", "v", fx);
  TokenAccessPolicy policy("s3cret");
  const StoreLimits limits;
  auto screen = [&](ClientId client, const Command& cmd) {
    return policy.screen(model, client, cmd, limits);
  };
  const ClientId stranger = 1, agent = 2;

  // A worker's own keys pass through untouched.
  CHECK_FALSE(screen(stranger, get("/worker/key")));
  // Any request naming a rendezvous key closes the connection.
  auto refused = screen(stranger, Command{Op::Set, {"/ddprun/job/0/stop"}, {"0|pwned"}, 0, 0});
  REQUIRE(refused);
  CHECK(refused->close_reason);
  auto multi =
      screen(stranger, Command{Op::MultiGet, {"/worker/key", "/ddprun/job/0/stop"}, {}, 0, 0});
  REQUIRE(multi);
  CHECK(multi->close_reason);
  // Listing hides them.
  auto listed = screen(stranger, Command{Op::ListKeys, {}, {}, 0, 0});
  REQUIRE(listed);
  std::string expect;
  put_i64(expect, 1);
  put_bytes(expect, "/worker/key");
  CHECK(listed->reply == expect);
  // A response without a challenge, and a wrong response, close the connection.
  CHECK(screen(stranger, get(std::string(kAuthResponsePrefix) + "00"))->close_reason);
  auto challenge = screen(stranger, get(std::string(kAuthChallengeKey)));
  REQUIRE(challenge);
  const std::string c1 = challenge->reply.substr(8);
  CHECK(c1.size() == 32);
  auto wrong =
      screen(stranger, get(std::string(kAuthResponsePrefix) + challenge_response("guess", c1)));
  REQUIRE(wrong);
  CHECK(*wrong->close_reason == "wrong rendezvous token");
  // The challenge was used up by the wrong guess: the right answer to it no longer works.
  CHECK(screen(stranger, get(std::string(kAuthResponsePrefix) + challenge_response("s3cret", c1)))
            ->close_reason);

  // The agent proves the token and then has every key.
  auto c2 = screen(agent, get(std::string(kAuthChallengeKey)))->reply.substr(8);
  CHECK(c2 != c1);
  auto ok = screen(agent, get(std::string(kAuthResponsePrefix) + challenge_response("s3cret", c2)));
  REQUIRE(ok);
  CHECK_FALSE(ok->close_reason);
  CHECK(ok->reply == bytes_reply("ok"));
  CHECK_FALSE(screen(agent, get("/ddprun/job/0/stop")));
  CHECK_FALSE(screen(agent, Command{Op::ListKeys, {}, {}, 0, 0}));
  policy.forget(agent);  // a new connection with the same id would start unproven
  CHECK(screen(agent, get("/ddprun/job/0/stop")));

  // A stranger's filtered LIST_KEYS keeps the store's reply bound.
  StoreLimits tight;
  tight.max_reply_bytes = 16;
  auto too_big = policy.screen(model, stranger, Command{Op::ListKeys, {}, {}, 0, 0}, tight);
  REQUIRE(too_big);
  CHECK(too_big->close_reason);
}

TEST_CASE("access policy: the replication keys (follow, promote, fence) need the token too") {
  StoreModel model;
  Effects fx;
  model.set("/worker/key", "v", fx);
  model.set("/ddprun.replication/left-over", "x", fx);
  TokenAccessPolicy policy("s3cret");
  const StoreLimits limits;
  auto screen = [&](ClientId client, const Command& cmd) {
    return policy.screen(model, client, cmd, limits);
  };
  const ClientId stranger = 1, standby = 2;
  CHECK(is_protected_key(kFollowKey));
  CHECK(is_protected_key(kPromoteKey));
  CHECK(is_protected_key(kFenceKey));
  CHECK_FALSE(is_protected_key("/ddprun.replicationx"));  // the prefix ends with its '/'

  // A stranger may neither subscribe (and read every key), nor promote, nor fence: each closes.
  auto follow = screen(stranger, get(std::string(kFollowKey)));
  REQUIRE(follow);
  REQUIRE(follow->close_reason);
  CHECK(*follow->close_reason == "a standby's subscription without the job's token");
  auto promote =
      screen(stranger, Command{Op::CompareSet, {std::string(kPromoteKey)}, {"", "2"}, 0, 0});
  REQUIRE(promote);
  CHECK(*promote->close_reason == "a promotion without the job's token");
  auto fence = screen(stranger, Command{Op::Set, {std::string(kFenceKey)}, {"9"}, 0, 0});
  REQUIRE(fence);
  CHECK(*fence->close_reason == "a fence without the job's token");
  CHECK(screen(stranger, get("/ddprun.replication/other"))->close_reason);
  // Listing hides them as it hides the rendezvous keys.
  auto listed = screen(stranger, Command{Op::ListKeys, {}, {}, 0, 0});
  REQUIRE(listed);
  std::string expect;
  put_i64(expect, 1);
  put_bytes(expect, "/worker/key");
  CHECK(listed->reply == expect);

  // A standby (or an agent) that proved the token passes through to the replication hub.
  auto c = screen(standby, get(std::string(kAuthChallengeKey)))->reply.substr(8);
  auto ok =
      screen(standby, get(std::string(kAuthResponsePrefix) + challenge_response("s3cret", c)));
  REQUIRE(ok);
  CHECK_FALSE(ok->close_reason);
  CHECK_FALSE(screen(standby, get(std::string(kFollowKey))));
  CHECK_FALSE(screen(standby, Command{Op::Set, {std::string(kFenceKey)}, {"2"}, 0, 0}));
  CHECK_FALSE(
      screen(standby, Command{Op::CompareSet, {std::string(kPromoteKey)}, {"", "2"}, 0, 0}));
}

TEST_CASE(
    "access policy: the handshake's own requests are named as such (a standby lets them in)") {
  TokenAccessPolicy policy("t0ken");
  CHECK(policy.is_handshake(Command{Op::Get, {std::string(kAuthChallengeKey)}, {}, 0, 0}));
  CHECK(policy.is_handshake(
      Command{Op::Get, {std::string(kAuthResponsePrefix) + "abcdef"}, {}, 0, 0}));
  CHECK_FALSE(policy.is_handshake(Command{Op::Get, {"/ddprun/k"}, {}, 0, 0}));
  CHECK_FALSE(policy.is_handshake(Command{Op::Set, {std::string(kAuthChallengeKey)}, {"x"}, 0, 0}));
  CHECK_FALSE(policy.is_handshake(Command{Op::ListKeys, {}, {}, 0, 0}));
}
