// The token's pure parts: HMAC-SHA256 (OpenSSL) against reference values, challenges, and the
// store-side access policy driven against a real StoreModel (no sockets).
#include <doctest/doctest.h>

#include <set>

#include "rendezvous/codec.hpp"
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
