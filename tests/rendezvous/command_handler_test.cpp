#include <doctest/doctest.h>

#include "rendezvous/command_handler.hpp"
#include "tests/rendezvous/frames.hpp"

using namespace ddp::rdzv;
using ddp::rdzv::test::make;

namespace {
std::string i64_bytes(std::int64_t v) {
  std::string s;
  put_i64(s, v);
  return s;
}
}  // namespace

TEST_CASE("handler: G2 must start with VALIDATE and never repeat it") {
  StoreModel m;
  auto ok =
      handle_command(m, 1, Generation::G2, make(Op::Validate, {}, {}, 0, kValidateMagic), true);
  CHECK_FALSE(ok.close_reason);
  CHECK(ok.reply.empty());
  auto again =
      handle_command(m, 1, Generation::G2, make(Op::Validate, {}, {}, 0, kValidateMagic), false);
  CHECK(again.close_reason);
  auto not_first = handle_command(m, 2, Generation::G2, make(Op::GetNumKeys), true);
  CHECK(not_first.close_reason);
  auto wrong_magic =
      handle_command(m, 3, Generation::G2, make(Op::Validate, {}, {}, 0, 0x12345678), true);
  REQUIRE(wrong_magic.close_reason);
  CHECK(*wrong_magic.close_reason == "bad VALIDATE magic 0x12345678");
  auto ping = handle_command(m, 1, Generation::G2, make(Op::Ping, {}, {}, 0, 0xDEADBEEF), false);
  std::string echo;
  put_u32(echo, 0xDEADBEEF);
  CHECK(ping.reply == echo);
}

TEST_CASE("handler: GET of a missing key closes G1 and answers empty on G2") {
  StoreModel m;
  CHECK(handle_command(m, 1, Generation::G1, make(Op::Get, {"/none"}), true).close_reason);
  auto g2 = handle_command(m, 2, Generation::G2, make(Op::Get, {"/none"}), false);
  CHECK_FALSE(g2.close_reason);
  CHECK(g2.reply == i64_bytes(0));
  auto mg = handle_command(m, 2, Generation::G2, make(Op::MultiGet, {"/none", "/none"}), false);
  CHECK(mg.reply == i64_bytes(0) + i64_bytes(0));
}

TEST_CASE("handler: ADD on a non-number closes the connection without a reply") {
  StoreModel m;
  Effects fx;
  m.set("/t", "text", fx);
  auto out = handle_command(m, 1, Generation::G1, make(Op::Add, {"/t"}, {}, 1), true);
  CHECK(out.close_reason);
  CHECK(out.reply.empty());
  CHECK(handle_command(m, 1, Generation::G1, make(Op::Add, {"/n"}, {}, 3), true).reply ==
        i64_bytes(3));
}

TEST_CASE("handler: WAIT answers later, CANCEL_WAIT always answers WAIT_CANCELED") {
  StoreModel m;
  auto wait = handle_command(m, 1, Generation::G2, make(Op::Wait, {"/k"}), false);
  CHECK(wait.reply.empty());
  auto set = handle_command(m, 2, Generation::G2, make(Op::Set, {"/k"}, {"v"}), false);
  CHECK(set.effects.woken == std::vector<ClientId>{1});
  auto wait2 = handle_command(m, 1, Generation::G2, make(Op::Wait, {"/other"}), false);
  CHECK(wait2.reply.empty());
  auto cancel = handle_command(m, 1, Generation::G2, make(Op::CancelWait), false);
  CHECK(cancel.reply == std::string(1, '\x01'));
  CHECK(m.pending_wait_count() == 0);
  CHECK(handle_command(m, 1, Generation::G2, make(Op::CancelWait), false).reply ==
        std::string(1, '\x01'));
}

TEST_CASE("handler: a G1 request after a timed-out WAIT drops the stale registration") {
  StoreModel m;
  CHECK(handle_command(m, 1, Generation::G1, make(Op::Wait, {"/stray"}), true).reply.empty());
  CHECK(m.pending_wait_count() == 1);
  handle_command(m, 1, Generation::G1, make(Op::GetNumKeys), false);
  CHECK(m.pending_wait_count() == 0);
  auto set = handle_command(m, 2, Generation::G1, make(Op::Set, {"/stray"}, {"v"}), true);
  CHECK(set.effects.woken.empty());  // no stray STOP_WAITING for client 1
}

TEST_CASE("handler: WATCH_KEY answers KEY_CALLBACK_REGISTERED, QUEUE_POP layouts, LIST_KEYS") {
  StoreModel m;
  CHECK(handle_command(m, 1, Generation::G1, make(Op::WatchKey, {"/wk"}), true).reply ==
        std::string(1, '\x03'));
  CHECK(handle_command(m, 2, Generation::G2, make(Op::QueuePop, {"/q"}), false).reply ==
        i64_bytes(0));
  handle_command(m, 2, Generation::G2, make(Op::QueuePush, {"/q"}, {"ab"}), false);
  std::string popped = i64_bytes(1);
  put_bytes(popped, "ab");
  CHECK(handle_command(m, 2, Generation::G2, make(Op::QueuePop, {"/q"}), false).reply == popped);
  handle_command(m, 2, Generation::G2, make(Op::Set, {"/only"}, {"v"}), false);
  std::string listed = i64_bytes(1);
  put_bytes(listed, "/only");
  CHECK(handle_command(m, 2, Generation::G2, make(Op::ListKeys), false).reply == listed);
}

TEST_CASE("handler: requests past the store's bounds close their connection and change nothing") {
  StoreModel m;
  StoreLimits limits;
  limits.max_value_bytes = 100;
  limits.max_reply_bytes = 1000;
  limits.max_keys = 3;
  limits.max_store_bytes = 1000;
  auto run = [&](Command cmd) {
    return handle_command(m, 1, Generation::G2, std::move(cmd), false, limits);
  };
  REQUIRE_FALSE(run(make(Op::Set, {"/v"}, {std::string(90, 'x')})).close_reason);

  SUBCASE("reply size") {
    auto out = run(make(Op::MultiGet, std::vector<std::string>(11, "/v")));  // 8 + 11 * 98 bytes
    REQUIRE(out.close_reason);
    CHECK(*out.close_reason ==
          "MULTI_GET reply of 1086 bytes exceeds the reply limit of 1000 bytes");
    CHECK(out.reply.empty());
    CHECK_FALSE(run(make(Op::MultiGet, std::vector<std::string>(10, "/v"))).close_reason);
  }
  SUBCASE("APPEND past the value limit") {
    auto out = run(make(Op::Append, {"/v"}, {std::string(11, 'y')}));
    REQUIRE(out.close_reason);
    CHECK(out.close_reason->find("APPEND would make a value of 101 bytes") != std::string::npos);
    CHECK(m.get("/v")->size() == 90);
    CHECK_FALSE(run(make(Op::Append, {"/v"}, {std::string(10, 'y')})).close_reason);
  }
  SUBCASE("key count") {
    CHECK_FALSE(run(make(Op::Add, {"/a"}, {}, 1)).close_reason);
    CHECK_FALSE(run(make(Op::QueuePush, {"/q"}, {"item"})).close_reason);
    auto out = run(make(Op::Set, {"/b"}, {"v"}));
    REQUIRE(out.close_reason);
    CHECK(out.close_reason->find("key limit of 3") != std::string::npos);
    CHECK(m.get("/b") == nullptr);
    CHECK_FALSE(
        run(make(Op::Set, {"/a"}, {"2"})).close_reason);  // an existing key may be rewritten
  }
  SUBCASE("store bytes, for every writer") {
    limits.max_keys = 100;
    limits.max_store_bytes = 500;  // /v, /pad and /pad2 hold 473 of it
    for (Command cmd :
         {make(Op::MultiSet, {"/m1", "/m2"}, {std::string(100, 'm'), std::string(100, 'm')}),
          make(Op::CompareSet, {"/c"}, {"", std::string(100, 'c')}),
          make(Op::Wait, std::vector<std::string>(3, std::string(100, 'w')))}) {
      CHECK_FALSE(run(make(Op::Set, {"/pad"}, {std::string(90, 'p')})).close_reason);
      CHECK_FALSE(run(make(Op::Set, {"/pad2"}, {std::string(90, 'p')})).close_reason);
      const std::size_t held = m.held_bytes();
      auto out = run(std::move(cmd));
      REQUIRE(out.close_reason);
      CHECK(out.close_reason->find("past its limit of 500 bytes") != std::string::npos);
      CHECK(m.held_bytes() == held);
      CHECK(m.held_bytes() <= limits.max_store_bytes);
    }
  }
}

TEST_CASE("handler: TAGGED turns tags on once; G2 WATCH_KEY and UNWATCH need it") {
  StoreModel m;
  const Command tagged = make(Op::Tagged, {}, {}, 0, kTaggedVersion);
  auto on = handle_command(m, 1, Generation::G2, Command(tagged), false, StoreLimits{});
  CHECK_FALSE(on.close_reason);
  CHECK(on.tags_on);
  CHECK(on.reply == std::string(1, static_cast<char>(kTaggedOn)));
  // Twice: closed (the client's framing would be ambiguous).
  auto twice =
      handle_command(m, 1, Generation::G2, Command(tagged), false, StoreLimits{}, Framing::Tagged);
  CHECK(twice.close_reason);
  CHECK_FALSE(twice.tags_on);
  // An unknown version: closed.
  CHECK(handle_command(m, 2, Generation::G2, make(Op::Tagged, {}, {}, 0, 99), false).close_reason);
  // Plain G2: a notification would desynchronise the client, so no WATCH_KEY nor UNWATCH.
  CHECK(handle_command(m, 3, Generation::G2, make(Op::WatchKey, {"/w"}), false).close_reason);
  CHECK(handle_command(m, 3, Generation::G2, make(Op::Unwatch, {"/w"}), false).close_reason);
  CHECK(m.watch_registration_count() == 0);
  // Tagged: registered (reply 03 as in 1.13), notified, unwatched.
  auto watch = handle_command(m, 1, Generation::G2, make(Op::WatchKey, {"/w"}), false,
                              StoreLimits{}, Framing::Tagged);
  CHECK_FALSE(watch.close_reason);
  CHECK(watch.reply == std::string(1, '\x03'));
  CHECK(m.watch_registration_count() == 1);
  auto set = handle_command(m, 4, Generation::G2, make(Op::Set, {"/w"}, {"v"}), false);
  REQUIRE(set.effects.events.size() == 1);
  CHECK(*set.effects.events[0].watchers == std::vector<ClientId>{1});
  auto unwatch = handle_command(m, 1, Generation::G2, make(Op::Unwatch, {"/w"}), false,
                                StoreLimits{}, Framing::Tagged);
  CHECK(unwatch.reply == std::string(1, '\x01'));
  CHECK(m.watch_registration_count() == 0);
  CHECK(handle_command(m, 1, Generation::G2, make(Op::Unwatch, {"/w"}), false, StoreLimits{},
                       Framing::Tagged)
            .reply == std::string(1, '\x00'));
  CHECK(handle_command(m, 4, Generation::G2, make(Op::Set, {"/w"}, {"x"}), false)
            .effects.events.empty());
  // PROBE works on any G2 connection.
  auto probe = handle_command(m, 3, Generation::G2, make(Op::Probe, {"/w", "/none"}), false);
  CHECK(probe.reply == std::string("\x04\x01\x00", 3));
}

TEST_CASE("handler: watch registrations count against the store's bytes, and UNWATCH gives back") {
  StoreModel m;
  StoreLimits limits;
  limits.max_store_bytes = 3 * StoreModel::entry_bytes(2, 0);
  for (const char* key : {"/a", "/b", "/c"}) {
    CHECK_FALSE(handle_command(m, 1, Generation::G2, make(Op::WatchKey, {key}), false, limits,
                               Framing::Tagged)
                    .close_reason);
  }
  CHECK(handle_command(m, 1, Generation::G2, make(Op::WatchKey, {"/d"}), false, limits,
                       Framing::Tagged)
            .close_reason);
  handle_command(m, 1, Generation::G2, make(Op::Unwatch, {"/a"}), false, limits, Framing::Tagged);
  CHECK_FALSE(handle_command(m, 1, Generation::G2, make(Op::WatchKey, {"/d"}), false, limits,
                             Framing::Tagged)
                  .close_reason);
  m.remove_client(1);
  CHECK(m.held_bytes() == 0);
  CHECK(m.watch_registration_count() == 0);
}
