// SPDX-License-Identifier: MIT
// The /status model, the worst-first order and the terminal frame (sizes, NO_COLOR, bounds).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include "launcher/view/status_model.hpp"
#include "launcher/view/terminal_frame.hpp"

using namespace ddp::launcher::view;
using nlohmann::json;

namespace {

json rank(int r, long long step, double age, bool straggler = false, json exit = nullptr) {
  return {{"rank", r},         {"local_rank", r},
          {"pid", 1000 + r},   {"state", exit.is_null() ? "running" : "exited"},
          {"last_step", step}, {"last_progress_age_s", age},
          {"heartbeats", 3},   {"straggler", straggler},
          {"exit", exit}};
}

json status(json ranks) {
  return {{"phase", "running"},
          {"attempt", 1},
          {"nodes", 2},
          {"host", "h"},
          {"hang_timeout_s", 0},
          {"ranks", ranks},
          {"job",
           {{"run_id", "j1"},
            {"state", "running"},
            {"attempt", 1},
            {"world_size", 4},
            {"node_rank", 0},
            {"num_nodes", 2},
            {"nodes",
             {{{"name", "a"}, {"node_rank", 0}, {"state", "running"}, {"local_world_size", 2}},
              {{"name", "b"}, {"node_rank", nullptr}, {"state", "lost"}}}}}},
          {"events",
           {{{"event", "node_lost"}, {"time", 100.0}, {"message", "lost node 1 (b)"}},
            {{"event", "rescale"},
             {"time", 101.0},
             {"change", "spare"},
             {"old_world_size", 4},
             {"new_world_size", 4},
             {"reason", "r"}}}}};
}

size_t chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

TEST_CASE("parse_status reads the job, the nodes, the ranks and the events") {
  auto m = parse_status(status({rank(0, 10, 0.1), rank(1, 3, 0.2, true)}).dump());
  REQUIRE(m);
  CHECK(m->run_id == "j1");
  CHECK(m->world_size == 4);
  REQUIRE(m->nodes.size() == 2);
  CHECK(m->nodes[1].state == "lost");
  CHECK_FALSE(m->nodes[1].node_rank);
  REQUIRE(m->ranks.size() == 2);
  CHECK(m->ranks[1].straggler);
  CHECK(m->ranks[0].step == 10);
  REQUIRE(m->events.size() == 2);
  CHECK(m->events[0].text == "lost node 1 (b)");
}

TEST_CASE("parse_status refuses what is not ddprun's status") {
  CHECK_FALSE(parse_status("<html>"));
  CHECK_FALSE(parse_status("{\"a\":1}"));
  CHECK(parse_status("[]").error().exit_code == 69);
}

TEST_CASE("worst first: failed, then silent, then stragglers, then the slowest") {
  auto m = parse_status(status({rank(0, 10, 0.1), rank(1, 9, 0.1, true), rank(2, 10, 30.0),
                                rank(3, 1, 0.1, false, "SIGKILL"), rank(4, 10, 0.1)})
                            .dump());
  REQUIRE(m);
  RateHistory rates;
  auto order = worst_first(m->ranks, rates, 0);
  CHECK(order[0].rank == 3);
  CHECK(order[1].rank == 2);
  CHECK(order[2].rank == 1);
}

TEST_CASE("rates come from successive polls; a restart starts them again") {
  RateHistory rates;
  StatusModel m;
  m.ranks.push_back(RankStatus{0, 0, 0, 1, "running", 10, 0.1, false, ""});
  m.ranks.push_back(RankStatus{0, 1, 1, 2, "running", 10, 0.1, false, ""});
  rates.note(m, 0);
  m.ranks[0].step = 20;
  m.ranks[1].step = 12;
  rates.note(m, 2);
  CHECK(*rates.rate(0, 0) == doctest::Approx(5.0));
  CHECK(*rates.rate(0, 1) == doctest::Approx(1.0));
  CHECK(worst_first(m.ranks, rates, 0)[0].rank == 1);  // the slower one
  m.ranks[0].step = 1;
  rates.note(m, 3);
  CHECK_FALSE(rates.rate(0, 0));
  CHECK(rates.recent(0, 0, 10).empty());
  CHECK(rates.recent(0, 1, 10).size() == 2);
}

TEST_CASE("the frame fits 80x24 and larger, every line exactly the width") {
  json ranks = json::array();
  for (int i = 0; i < 4; ++i) ranks.push_back(rank(i, 10 + i, 0.1, i == 2));
  auto m = parse_status(status(ranks).dump());
  REQUIRE(m);
  RateHistory rates;
  for (auto [w, h] : {std::pair{80, 24}, std::pair{132, 50}, std::pair{200, 60}}) {
    auto lines = render_frame(*m, rates, {w, h, false, "127.0.0.1:1", "q quits", ""});
    CHECK(lines.size() == static_cast<size_t>(h));
    for (const auto& l : lines) CHECK(chars(l) == static_cast<size_t>(w));
    std::string all;
    for (const auto& l : lines) all += l + "\n";
    CHECK(all.find("\x1b[") == std::string::npos);  // no colour unless asked
    CHECK(all.find("SLOW") != std::string::npos);
    CHECK(all.find("lost") != std::string::npos);
    CHECK(all.find("j1") != std::string::npos);
  }
  auto colored = render_frame(*m, rates, {80, 24, true, "x", "", ""});
  CHECK(colored[0].find("\x1b[") != std::string::npos);
}

TEST_CASE("1,000 ranks fit the screen: the worst shown, the rest counted") {
  json ranks = json::array();
  for (int i = 0; i < 1000; ++i) ranks.push_back(rank(i, 100, 0.1, i == 777));
  auto m = parse_status(status(ranks).dump());
  REQUIRE(m);
  RateHistory rates;
  auto lines = render_frame(*m, rates, {80, 24, false, "", "", ""});
  CHECK(lines.size() == 24);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  CHECK(all.find("  777 ") != std::string::npos);
  CHECK(all.find("more rank(s)") != std::string::npos);
}

TEST_CASE("fit and sparkline count characters, not bytes") {
  CHECK(chars(fit("▁▂▃▄▅", 3)) == 3);
  CHECK(fit("ab", 4) == "ab  ");
  CHECK(sparkline({0, 1, 2, 4}, 4) == "▁▃▅█");
  CHECK(chars(sparkline(std::vector<double>(100, 1.0), 10)) == 10);
}
