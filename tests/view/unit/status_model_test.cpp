// SPDX-License-Identifier: MIT
// The /status model, the worst-first order and the terminal frame (sizes, NO_COLOR, bounds).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <iterator>
#include <sstream>

#include "launcher/common/terminal_text.hpp"
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

TEST_CASE("job text in the frame is shown, never sent raw; wide characters take two columns") {
  json s = status(json::array({rank(0, 1, 0.1)}));
  // A host name set with `unshare -u` to a title change and a screen clear, a CJK node name.
  s["host"] = "evil\x1b]0;pwned\x07\x1b[2J";
  s["job"]["nodes"][0]["name"] = "\xE8\x8A\x82\xE7\x82\xB9-\x1b]52;c;eA==\x07";
  s["events"].push_back({{"event", "timer_expired"},
                         {"time", 102.0},
                         {"scope", "s\x1b[2J\x9b"},
                         {"pid", 1},
                         {"rank", 0}});
  auto m = parse_status(s.dump(-1, ' ', false, json::error_handler_t::replace));
  REQUIRE(m);
  RateHistory rates;
  for (auto [w, h] : {std::pair{80, 24}, std::pair{200, 50}}) {
    auto lines = render_frame(*m, rates, {w, h, false, "x", "", ""});
    std::string all;
    for (const auto& l : lines) {
      CHECK(ddp::launcher::display_width(l) == w);
      all += l + "\n";
    }
    CHECK(all.find('\x1b') == std::string::npos);
    CHECK(all.find('\x07') == std::string::npos);
    if (w == 200)
      CHECK(all.find("evil^[]0;pwned^G^[[2J") != std::string::npos);  // the header's end
    CHECK(all.find("\xE8\x8A\x82\xE7\x82\xB9-^[]52;c;eA==^G") != std::string::npos);
  }
}

TEST_CASE("the end, failures kept on screen, and the event box taking the free lines") {
  json s = status(json::array({rank(0, 5, 0.1, false, 0)}));
  s["job"]["state"] = "failed";
  s["job"]["exit_code"] = 3;
  s["job"]["root_cause"] = "rank 1 exited with code 3";
  for (int i = 0; i < 30; ++i)
    s["events"].push_back(
        {{"event", "worker_start"}, {"time", 110.0 + i}, {"rank", i}, {"seq", i}});
  auto m = parse_status(s.dump());
  REQUIRE(m);
  CHECK(m->ended());
  CHECK(m->exit_code == 3);
  REQUIRE(m->failures.size() == 1);  // the node_lost event
  RateHistory rates;
  FrameOptions o{80, 50, false, "x", "", ""};
  o.failures = {EventLine{100.0, "worker_exit", "rank 1 ended: exit 3", 1}};
  auto lines = render_frame(*m, rates, o);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  CHECK(all.find("the job ended: failed, exit 3: rank 1 exited with code 3") != std::string::npos);
  CHECK(all.find("failures seen: 1") != std::string::npos);
  CHECK(all.find("rank 1 ended: exit 3") != std::string::npos);
  // 32 events: with 50 lines, all of them are shown (before: the last 6, the rest left blank).
  size_t shown = 0;
  for (const auto& l : lines) shown += l.find("worker_start") != std::string::npos;
  CHECK(shown == 30);
}

TEST_CASE("top's sort, filter, node and scroll") {
  json ranks = json::array();
  for (int i = 0; i < 6; ++i)
    ranks.push_back(rank(i, 100 - i, 0.1, i == 4, i == 2 ? json(1) : json()));
  auto m = parse_status(status(ranks).dump());
  REQUIRE(m);
  RateHistory rates;
  FrameOptions o;
  CHECK(rank_rows(*m, rates, o).front().rank == 2);  // failed first
  o.sort = RankSort::Rank;
  CHECK(rank_rows(*m, rates, o).front().rank == 0);
  o.sort = RankSort::Step;
  CHECK(rank_rows(*m, rates, o).front().rank == 5);  // the lowest step
  o.filter = RankFilter::Trouble;
  CHECK(rank_rows(*m, rates, o).size() == 2);  // failed and slow
  o.filter = RankFilter::All;
  o.node = 1;
  CHECK(rank_rows(*m, rates, o).empty());
  o.node.reset();
  o.sort = RankSort::Rank;
  o.height = 12;
  o.scroll = 3;
  auto lines = render_frame(*m, rates, o);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  CHECK(all.find("above") != std::string::npos);
  o.help = true;
  lines = render_frame(
      *m, rates,
      {80, 40, false, "", "", "", {}, RankSort::Worst, RankFilter::All, std::nullopt, 0, true});
  all.clear();
  for (const auto& l : lines) all += l + "\n";
  CHECK(all.find("sort: worst first, rank, step, steps/s") != std::string::npos);
}

TEST_CASE("every rank's CPU and memory in the frame, at 80 columns too; odd numbers are '-'") {
  json ranks = json::array();
  ranks.push_back(rank(0, 10, 0.1));
  ranks.back()["cpu_percent"] = 97.4;
  ranks.back()["rss_bytes"] = 157286400;  // 150 MiB
  ranks.push_back(rank(1, 10, 0.1));
  ranks.back()["cpu_percent"] = 0.4;
  ranks.back()["rss_bytes"] = 12582912;  // 12 MiB
  ranks.push_back(rank(2, 10, 0.1));
  ranks.back()["cpu_percent"] = "lots";
  ranks.back()["rss_bytes"] = -1;
  auto m = parse_status(status(ranks).dump());
  REQUIRE(m);
  CHECK(m->ranks[0].cpu_percent == doctest::Approx(97.4));
  CHECK(m->ranks[0].rss_bytes == 157286400);
  CHECK_FALSE(m->ranks[2].cpu_percent);
  CHECK_FALSE(m->ranks[2].rss_bytes);
  RateHistory rates;
  for (int w : {80, 200}) {
    FrameOptions o{w, 24, false, "", "", ""};
    o.sort = RankSort::Rank;
    auto lines = render_frame(*m, rates, o);
    std::vector<std::vector<std::string>> rows;
    for (const auto& l : lines) {
      std::istringstream in(l);
      std::vector<std::string> f{std::istream_iterator<std::string>(in), {}};
      if (f.size() > 9 && f[0] == "0" && f[1].find_first_not_of("0123456789") == std::string::npos)
        rows.push_back(f);
    }
    REQUIRE(rows.size() == 3);
    // NODE RANK LOC PID STATE STEP STEP/S CPU MEM ...
    CHECK(rows[0][7] == "97%");
    CHECK(rows[0][8] == "150M");
    CHECK(rows[1][7] == "0%");
    CHECK(rows[1][8] == "12M");
    CHECK(rows[2][7] == "-");
    CHECK(rows[2][8] == "-");
  }
  CHECK(cpu_text(2500.0) == "999+");
  CHECK(memory_text(1288490188) == "1.2G");
  CHECK(memory_text(512) == "512B");
  CHECK(memory_text(std::nullopt) == "-");
}

TEST_CASE("a rank ddprun stopped is 'stopped', not a failure: the failed one stays the worst") {
  json ranks = json::array();
  ranks.push_back(rank(0, 10, 0.1, false, "SIGTERM"));
  ranks.back()["stopped_by_ddprun"] = true;
  ranks.push_back(rank(1, 10, 0.1, false, "3"));
  auto m = parse_status(status(ranks).dump());
  REQUIRE(m);
  CHECK(m->ranks[0].stopped);
  CHECK(severity(m->ranks[0], 0) == 1);
  CHECK(severity(m->ranks[1], 0) == 4);
  RateHistory rates;
  auto lines = render_frame(*m, rates, {120, 24, false, "", "", ""});
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  CHECK(all.find("stopped") != std::string::npos);
  CHECK(all.find("failed") != std::string::npos);
  const auto failed = all.find(" failed ");
  const auto stopped = all.find(" stopped ");
  CHECK(failed < stopped);  // worst first
}
