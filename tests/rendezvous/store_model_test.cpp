#include <doctest/doctest.h>

#include <algorithm>
#include <limits>

#include "rendezvous/store_model.hpp"

using namespace ddp::rdzv;

TEST_CASE("parse_counter follows std::stoll") {
  CHECK(parse_counter("5") == 5);
  CHECK(parse_counter("-3") == -3);
  CHECK(parse_counter(" 12x") == 12);
  CHECK(parse_counter("+7") == 7);
  CHECK(parse_counter("-9223372036854775808") == std::numeric_limits<std::int64_t>::min());
  CHECK(parse_counter("9223372036854775807") == std::numeric_limits<std::int64_t>::max());
  CHECK_FALSE(parse_counter("9223372036854775808"));
  CHECK_FALSE(parse_counter("abc"));
  CHECK_FALSE(parse_counter(""));
  CHECK_FALSE(parse_counter("-"));
}

TEST_CASE("ADD stores decimal text and starts from zero") {
  StoreModel m;
  Effects fx;
  CHECK(m.add("/cnt", 5, fx) == 5);
  CHECK(*m.get("/cnt") == "5");
  CHECK(m.add("/cnt", -7, fx) == -2);
  CHECK(*m.get("/cnt") == "-2");
  m.set("/s", " 12x", fx);
  CHECK(m.add("/s", 1, fx) == 13);
  m.set("/bad", "abc", fx);
  CHECK_FALSE(m.add("/bad", 1, fx));
  CHECK(*m.get("/bad") == "abc");  // unchanged
  m.set("/max", "9223372036854775807", fx);
  CHECK(m.add("/max", 1, fx) == std::numeric_limits<std::int64_t>::min());  // wraps
}

TEST_CASE("COMPARE_SET: the four cases") {
  StoreModel m;
  Effects fx;
  CHECK(m.compare_set("/k", "x", "nv", CompareSetWake::IfPresent, fx) ==
        "x");  // absent, expected set
  CHECK(m.get("/k") == nullptr);
  CHECK(m.compare_set("/k", "", "Y2FuaW1hZGFt", CompareSetWake::IfPresent, fx) ==
        "Y2FuaW1hZGFt");  // create
  CHECK(m.compare_set("/k", "Y2FuaW1hZGFt", "s1", CompareSetWake::IfPresent, fx) == "s1");  // match
  CHECK(m.compare_set("/k", "stale", "s2", CompareSetWake::IfPresent, fx) == "s1");  // mismatch
  CHECK(*m.get("/k") == "s1");
  CHECK(m.compare_set("/e", "", "", CompareSetWake::IfPresent, fx) ==
        "");  // creates an empty value
  CHECK(m.get("/e") != nullptr);
}

TEST_CASE("COMPARE_SET wake policy: 1.13 never wakes, IfPresent wakes when the key exists") {
  StoreModel m;
  CHECK_FALSE(m.wait(1, {"/k"}));
  Effects fx;
  m.compare_set("/k", "", "v", CompareSetWake::Never, fx);
  CHECK(fx.woken.empty());
  m.delete_key("/k", fx);
  CHECK_FALSE(m.wait(2, {"/k"}));
  Effects miss;
  m.compare_set("/k", "x", "v", CompareSetWake::IfPresent, miss);  // stays absent: nobody wakes
  CHECK(miss.woken.empty());
  Effects hit;
  m.compare_set("/k", "", "v", CompareSetWake::IfPresent, hit);
  CHECK(hit.woken.size() == 2);
}

TEST_CASE("WAIT counts missing keys, duplicates twice, and wakes once") {
  StoreModel m;
  Effects fx;
  m.set("/a", "1", fx);
  CHECK(m.wait(7, {"/a"}));  // present: answer now
  CHECK(m.wait(7, {}));      // no keys: answer now
  CHECK_FALSE(m.wait(7, {"/b", "/b", "/c", "/a"}));
  CHECK(m.pending_wait_count() == 1);
  Effects b;
  m.set("/b", "x", b);
  CHECK(b.woken.empty());
  Effects c;
  m.add("/c", 1, c);
  CHECK(c.woken == std::vector<ClientId>{7});
  CHECK(m.pending_wait_count() == 0);
  CHECK(m.waiter_registration_count() == 0);
  Effects again;
  m.set("/c", "y", again);
  CHECK(again.woken.empty());  // woken exactly once
}

TEST_CASE("every writer wakes waiters: SET, ADD, APPEND, MULTI_SET element, QUEUE_PUSH") {
  StoreModel m;
  for (int i = 0; i < 4; ++i)
    CHECK_FALSE(m.wait(static_cast<ClientId>(i), {"/k" + std::to_string(i)}));
  Effects fx;
  m.set("/k0", "v", fx);
  m.add("/k1", 1, fx);
  m.append("/k2", "v", fx);
  m.set("/k3", "v", fx);
  CHECK(fx.woken == std::vector<ClientId>{0, 1, 2, 3});
  CHECK_FALSE(m.wait(10, {"/q"}));
  CHECK_FALSE(m.wait(11, {"/q"}));
  Effects q;
  m.queue_push("/q", "item", q);
  CHECK(q.woken.size() == 1);  // a push wakes a single consumer
  CHECK(m.pending_wait_count() == 1);
}

TEST_CASE("DELETE does not wake, CANCEL and remove_client leave nothing behind") {
  StoreModel m;
  Effects fx;
  m.set("/d", "v", fx);
  CHECK_FALSE(m.wait(1, {"/x", "/y"}));
  CHECK(m.delete_key("/d", fx));
  CHECK_FALSE(m.delete_key("/d", fx));
  CHECK(fx.woken.empty());
  CHECK(m.cancel_wait(1));
  CHECK_FALSE(m.cancel_wait(1));
  CHECK(m.waiter_registration_count() == 0);
  CHECK_FALSE(m.wait(2, {"/x"}));
  m.watch(2, "/x");
  m.watch(2, "/x");
  m.remove_client(2);
  CHECK(m.pending_wait_count() == 0);
  CHECK(m.waiter_registration_count() == 0);
  CHECK(m.watch_registration_count() == 0);
}

TEST_CASE("G1 watches: created, updated, deleted with old and new values") {
  StoreModel m;
  m.watch(5, "/wk");
  m.watch(6, "/wk");
  Effects fx;
  m.set("/wk", "abc", fx);
  m.add("/wk2", 1, fx);  // not watched
  m.set("/wk", "def", fx);
  m.compare_set("/wk", "def", "ghi", CompareSetWake::IfPresent, fx);
  m.append("/wk", "!", fx);
  m.delete_key("/wk", fx);
  REQUIRE(fx.events.size() == 5);  // one per change, naming both watchers
  CHECK(*fx.events[0].watchers == std::vector<ClientId>{5, 6});
  CHECK(fx.events[0].type == WatchEventType::KeyCreated);
  CHECK(fx.events[0].old_value == "");
  CHECK(fx.events[0].new_value == "abc");
  CHECK(fx.events[1].type == WatchEventType::KeyUpdated);
  CHECK(fx.events[1].old_value == "abc");
  CHECK(fx.events[2].new_value == "ghi");
  CHECK(fx.events[3].new_value == "ghi!");
  CHECK(fx.events[4].type == WatchEventType::KeyDeleted);
  CHECK(fx.events[4].old_value == "ghi!");
  CHECK(fx.events[4].new_value == "");
}

TEST_CASE("a connection's repeated WATCH_KEY is one registration; events share the list") {
  StoreModel m;
  CHECK(m.watch(5, "/wk"));
  for (int i = 0; i < 1000; ++i) CHECK_FALSE(m.watch(5, "/wk"));
  CHECK(m.watch(6, "/wk"));
  CHECK(m.watch_registration_count() == 2);
  CHECK(m.watch_total() == 2);
  CHECK(m.watch_count(5) == 1);
  Effects fx;
  m.set("/wk", "a", fx);
  m.set("/wk", "b", fx);
  REQUIRE(fx.events.size() == 2);
  // Not copied per change: both events hold the model's one list.
  CHECK(fx.events[0].watchers.get() == fx.events[1].watchers.get());
  // Changed while an event holds it: the event keeps what it was sent to.
  CHECK(m.unwatch(5, "/wk"));
  CHECK_FALSE(m.unwatch(5, "/wk"));
  CHECK(*fx.events[0].watchers == std::vector<ClientId>{5, 6});
  Effects later;
  m.set("/wk", "c", later);
  CHECK(*later.events[0].watchers == std::vector<ClientId>{6});
  m.remove_client(6);
  CHECK(m.watch_total() == 0);
  CHECK(m.held_bytes() == StoreModel::entry_bytes(3, 1));
}

TEST_CASE("QUEUE_PUSH notifies the queue's watchers (a proxy's queue WAITs)") {
  StoreModel m;
  m.watch(5, "/q");
  Effects fx;
  m.queue_push("/q", "a", fx);
  m.queue_push("/q", "b", fx);
  REQUIRE(fx.events.size() == 2);
  CHECK(fx.events[0].type == WatchEventType::KeyCreated);
  CHECK(fx.events[1].type == WatchEventType::KeyUpdated);
  CHECK(fx.events[0].key == "/q");
}

TEST_CASE("counters notify watchers with ASCII values") {
  StoreModel m;
  m.watch(1, "/c");
  Effects fx;
  m.add("/c", 3, fx);
  m.add("/c", 2, fx);
  REQUIRE(fx.events.size() == 2);
  CHECK(fx.events[0].type == WatchEventType::KeyCreated);
  CHECK(fx.events[1].old_value == "3");
  CHECK(fx.events[1].new_value == "5");
}

TEST_CASE("NUM_KEYS and LIST_KEYS count the map, not queues") {
  StoreModel m;
  Effects fx;
  m.add("init/", 1, fx);
  m.set("/a", "1", fx);
  m.queue_push("/q", "i", fx);
  CHECK(m.num_keys() == 2);
  auto keys = m.list_keys();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"/a", "init/"});
}

TEST_CASE("queues: FIFO, length before pop, separate namespace, count as present for CHECK") {
  StoreModel m;
  Effects fx;
  std::int64_t before = -1;
  CHECK_FALSE(m.queue_pop("/q", before));
  CHECK(before == 0);
  CHECK_FALSE(m.check({"/q"}));
  m.queue_push("/q", "a", fx);
  m.queue_push("/q", "b", fx);
  CHECK(m.check({"/q"}));
  CHECK(m.get("/q") == nullptr);
  CHECK(m.queue_len("/q") == 2);
  CHECK(m.queue_pop("/q", before) == "a");
  CHECK(before == 2);
  CHECK(m.queue_pop("/q", before) == "b");
  CHECK(m.queue_len("/q") == 0);
}

TEST_CASE("BARRIER releases everyone when the count is reached") {
  StoreModel m;
  Effects fx;
  CHECK(m.barrier(1, "/bar", 3, fx) == false);
  CHECK(m.barrier(2, "/bar", 3, fx) == false);
  CHECK(fx.woken.empty());
  CHECK(*m.get("/bar") == "2");
  CHECK(m.barrier(3, "/bar", 3, fx) == true);
  CHECK(fx.woken.size() == 2);
  CHECK(m.pending_wait_count() == 0);
  m.set("/nb", "zz", fx);
  CHECK_FALSE(m.barrier(4, "/nb", 2, fx).has_value());
}

TEST_CASE("held bytes and key count follow every writer and return to zero") {
  StoreModel m;
  Effects fx;
  const std::size_t o = StoreModel::kEntryOverheadBytes;
  m.set("/a", "xyz", fx);
  CHECK(m.held_bytes() == 2 + 3 + o);
  m.set("/a", "x", fx);
  CHECK(m.held_bytes() == 2 + 1 + o);
  m.append("/a", "1234", fx);
  CHECK(m.held_bytes() == 2 + 5 + o);
  m.add("/n", 10, fx);
  CHECK(m.held_bytes() == (2 + 5 + o) + (2 + 2 + o));
  CHECK(m.key_count() == 2);
  m.compare_set("/c", "", "new", CompareSetWake::IfPresent, fx);
  m.compare_set("/c", "new", "newer", CompareSetWake::IfPresent, fx);
  m.queue_push("/q", "item", fx);
  m.queue_push("/q", "item2", fx);
  CHECK(m.key_count() == 4);
  CHECK(m.wait(7, {"/missing", "/missing2"}) == false);
  m.watch(8, "/w");
  m.watch(8, "/w");
  CHECK(m.barrier(9, "/b", 2, fx).value_or(true) == false);
  CHECK(m.held_bytes() > 0);
  std::int64_t before = 0;
  m.queue_pop("/q", before);
  m.queue_pop("/q", before);
  for (const char* k : {"/a", "/n", "/c", "/b"}) m.delete_key(k, fx);
  m.remove_client(7);
  m.remove_client(8);
  m.remove_client(9);
  CHECK(m.key_count() == 0);
  CHECK(m.held_bytes() == 0);
}
