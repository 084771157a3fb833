// SPDX-License-Identifier: MIT
// torch 2.x FileTimerServer's rules, on the exact lines FileTimerClient writes.
#include <doctest/doctest.h>

#include "launcher/health/timer_table.hpp"

using namespace ddp::launcher::health;

namespace {
TimerRequest req(pid_t pid, const char* scope, double t, int sig = 9) {
  return {pid, scope, t, sig};
}
bool always_running(pid_t) { return true; }
}  // namespace

TEST_CASE("parses FileTimerClient's acquire and release lines") {
  auto acquire = parse_timer_request(
      R"({"version": 1, "pid": 4242, "scope_id": "train.py#12", "expiration_time": 1764570000.25, "signal": 9})");
  REQUIRE(acquire);
  CHECK(acquire->pid == 4242);
  CHECK(acquire->scope == "train.py#12");
  CHECK(acquire->expiration_time == doctest::Approx(1764570000.25));
  CHECK(acquire->signal == 9);
  auto release = parse_timer_request(
      R"({"version": 1, "pid": 4242, "scope_id": "train.py#12", "expiration_time": -1, "signal": 0})");
  REQUIRE(release);
  CHECK(release->expiration_time < 0);
}

TEST_CASE("bad lines are refused with a reason") {
  std::string why;
  CHECK_FALSE(parse_timer_request("not json", &why));
  CHECK(why == "not a JSON object");
  CHECK_FALSE(parse_timer_request(
      R"({"pid": "x", "scope_id": "s", "expiration_time": 1, "signal": 9})", &why));
  CHECK(why == "no integer \"pid\"");
  CHECK_FALSE(parse_timer_request(
      R"({"pid": -3, "scope_id": "s", "expiration_time": 1, "signal": 9})", &why));
  CHECK_FALSE(parse_timer_request(R"({"pid": 3, "expiration_time": 1, "signal": 9})", &why));
  CHECK(why == "no string \"scope_id\"");
  auto odd_signal =
      parse_timer_request(R"({"pid": 3, "scope_id": "s", "expiration_time": 1, "signal": 1000})");
  REQUIRE(odd_signal);
  CHECK(odd_signal->signal == 0);
}

TEST_CASE("a timer expires at its deadline, not before; a release cancels it") {
  TimerTable table;
  table.apply(req(10, "a", 100.0));
  CHECK(table.expired(99.9).empty());
  auto e = table.expired(100.0);
  REQUIRE(e.size() == 1);
  CHECK(e[0].pid == 10);
  CHECK(e[0].scope == "a");
  CHECK(e[0].signal == 9);
  CHECK(table.next_deadline() == 100.0);
  table.apply(req(10, "a", -1, 0));
  CHECK(table.expired(1e12).empty());
  CHECK_FALSE(table.next_deadline());
}

TEST_CASE("a second acquire of the same scope replaces the first") {
  TimerTable table;
  table.apply(req(10, "a", 100.0));
  table.apply(req(10, "a", 200.0));
  CHECK(table.size() == 1);
  CHECK(table.expired(150).empty());
}

TEST_CASE("per pid, the earliest expired timer with a signal decides") {
  TimerTable table;
  table.apply(req(7, "late", 50.0, 15));
  table.apply(req(7, "early-nosignal", 10.0, 0));
  table.apply(req(7, "middle", 20.0, 9));
  table.apply(req(8, "other", 1000.0));
  auto e = table.expired(60);
  REQUIRE(e.size() == 1);
  CHECK(e[0].scope == "middle");
  CHECK(e[0].signal == 9);
  CHECK(e[0].deadline == 20.0);
  CHECK(e[0].all_scopes == std::vector<std::string>{"early-nosignal", "middle", "late"});
}

TEST_CASE("expired timers without a signal kill nobody") {
  TimerTable table;
  table.apply(req(7, "s", 10.0, 0));
  auto e = table.expired(11);
  REQUIRE(e.size() == 1);
  CHECK(e[0].signal == 0);
}

TEST_CASE("clear drops the reaped pids' timers and those of pids no longer running") {
  TimerTable table;
  table.apply(req(1, "a", 10));
  table.apply(req(1, "b", 20));
  table.apply(req(2, "a", 10));
  table.apply(req(3, "a", 10));
  table.clear({1}, [](pid_t p) { return p != 3; });
  CHECK(table.size() == 1);
  CHECK(table.expired(100).at(0).pid == 2);
  table.clear({}, always_running);
  CHECK(table.size() == 1);
}
