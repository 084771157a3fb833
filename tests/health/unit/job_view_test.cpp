// SPDX-License-Identifier: MIT
// The job-wide view: the record each node publishes, read back whatever another agent wrote,
// merged with this node's ranks; the steps history against a fake clock.
#include <doctest/doctest.h>

#include <string>

#include "launcher/health/job_view.hpp"
#include "launcher/health/rank_usage.hpp"
#include "launcher/health/step_history.hpp"

using namespace ddp::launcher::health;
using nlohmann::json;

namespace {
PublishedNode two_ranks() {
  PublishedNode n;
  n.host = "host-b";
  n.attempt = 1;
  n.ranks.push_back({2, 0, 4242, "running", 17, 0.25, ""});
  n.ranks.push_back({3, 1, 4243, "exited", std::nullopt, std::nullopt, "SIGKILL"});
  return n;
}
}  // namespace

TEST_CASE("a published record reads back as written (ages in tenths)") {
  auto n = two_ranks();
  auto back = decode_published_node(encode_published_node(n));
  REQUIRE(back);
  CHECK(back->host == "host-b");
  CHECK(back->attempt == 1);
  REQUIRE(back->ranks.size() == 2);
  CHECK(back->ranks[0].step == 17);
  CHECK(back->ranks[0].age_s == doctest::Approx(0.3));
  CHECK(back->ranks[1].exit == "SIGKILL");
  CHECK_FALSE(back->ranks[1].step);
}

TEST_CASE("the record is bounded when written: ranks, texts, bytes") {
  PublishedNode n;
  n.host = std::string(10000, 'h');
  for (int i = 0; i < 500; ++i) {
    n.ranks.push_back({i, i, 1, std::string(1000, 's'), i, 1.0, std::string(1000, 'x')});
  }
  const std::string text = encode_published_node(n);
  CHECK(text.size() <= kMaxPublishedBytes);
  auto back = decode_published_node(text);
  REQUIRE(back);
  CHECK(back->host.size() == kMaxPublishedHost);
  CHECK(back->ranks.size() <= kMaxPublishedRanks);
  CHECK(back->ranks.size() + static_cast<size_t>(back->ranks_left_out) == 500);
  CHECK(back->ranks[0].state.size() == kMaxPublishedText);
}

TEST_CASE("a record that is not ddprun's, or too large, is ignored; odd fields are skipped") {
  CHECK_FALSE(decode_published_node(""));
  CHECK_FALSE(decode_published_node("0"));  // an older agent's placeholder, or junk
  CHECK_FALSE(decode_published_node("not json"));
  CHECK_FALSE(decode_published_node("[1,2]"));
  CHECK_FALSE(decode_published_node(std::string(kMaxPublishedBytes + 1, ' ')));
  CHECK_FALSE(decode_published_node(std::string(kMaxPublishedBytes, '[')));
  // A newer agent's extra fields and an older one's missing ones; wrong-typed rows dropped.
  auto back = decode_published_node(
      R"({"v":9,"host":7,"new":{"x":1},"ranks":[{"rank":"0"},{"rank":1,"step":"5","age_s":-3,
         "state":["x"]},5,{"rank":2,"step":1.5,"pid":9}]})");
  REQUIRE(back);
  CHECK(back->host.empty());
  REQUIRE(back->ranks.size() == 2);
  CHECK(back->ranks[0].rank == 1);
  CHECK_FALSE(back->ranks[0].step);
  CHECK_FALSE(back->ranks[0].age_s);
  CHECK(back->ranks[0].state.empty());
  CHECK(back->ranks[1].pid == 9);
  CHECK_FALSE(back->ranks[1].step);  // not a step number
}

TEST_CASE("merge: this node's ranks, then the others' by node rank, ages as seen here") {
  json local = json::array({{{"rank", 0}, {"local_rank", 0}, {"state", "running"}}});
  std::vector<RemoteNodeView> remote;
  remote.push_back({2, "host-c", false, std::nullopt, 0});  // published nothing (older agent)
  remote.push_back({1, "b", false, two_ranks(), 1.5});
  json ranks = merge_job_ranks(local, 0, "host-a", remote);
  REQUIRE(ranks.size() == 3);
  CHECK(ranks[0]["node_rank"] == 0);
  CHECK(ranks[0]["host"] == "host-a");
  CHECK_FALSE(ranks[0].contains("remote"));
  CHECK(ranks[1]["node_rank"] == 1);
  CHECK(ranks[1]["host"] == "host-b");  // as the node published it
  CHECK(ranks[1]["rank"] == 2);
  CHECK(ranks[1]["last_step"] == 17);
  CHECK(ranks[1]["last_progress_age_s"].get<double>() == doctest::Approx(1.75));
  CHECK(ranks[1]["remote"] == true);
  CHECK(ranks[2]["exit"] == "SIGKILL");
  CHECK(ranks[2]["last_progress_age_s"].is_null());

  json nodes = job_nodes_json(0, "host-a", 1, remote);
  REQUIRE(nodes.size() == 3);
  CHECK(nodes[0]["state"] == "up");
  CHECK(nodes[1]["node_rank"] == 1);
  CHECK(nodes[1]["ranks"] == 2);
  CHECK(nodes[2]["node_rank"] == 2);
  CHECK(nodes[2]["ranks"].is_null());
}

TEST_CASE("merge: a lost node's running ranks are lost, its ended ones keep their exit") {
  std::vector<RemoteNodeView> remote{{1, "b", true, two_ranks(), 7}};
  json ranks = merge_job_ranks(json::array(), 0, "a", remote);
  REQUIRE(ranks.size() == 2);
  CHECK(ranks[0]["state"] == "lost");
  CHECK(ranks[0]["last_progress_age_s"].get<double>() == doctest::Approx(7.25));
  CHECK(ranks[1]["state"] == "exited");
  CHECK(job_nodes_json(0, "a", 0, remote)[1]["state"] == "lost");
  // Its own record is never merged twice.
  std::vector<RemoteNodeView> self{{0, "a", false, two_ranks(), 0}};
  CHECK(merge_job_ranks(json::array(), 0, "a", self).empty());
}

TEST_CASE("a record's numbers out of range are wrong, not narrowed; a repeated rank is dropped") {
  auto back = decode_published_node(
      R"({"ranks_left_out":9223372036854775807,"ranks":[{"rank":4294967298},
         {"rank":1,"pid":18446744073709551615,"step":18446744073709551615,"local_rank":-4294967297},
         {"rank":1,"pid":5},{"rank":2147483648}]})");
  REQUIRE(back);
  REQUIRE(back->ranks.size() == 1);  // 2^32 + 2 is not rank 2; rank 1 twice: the first stands
  CHECK(back->ranks[0].rank == 1);
  CHECK(back->ranks[0].pid == 0);    // out of range: absent
  CHECK_FALSE(back->ranks[0].step);  // not -1
  CHECK(back->ranks[0].local_rank == 0);
  CHECK(back->ranks_left_out > 0);
  CHECK(back->ranks_left_out <= (1LL << 40));  // a sum that cannot overflow
  // 65 rows past the bound on top of the largest count: still bounded, never negative.
  std::string many = R"({"ranks_left_out":9223372036854775807,"ranks":[)";
  for (int i = 0; i < 70; ++i)
    many += (i ? "," : "") + std::string(R"({"rank":)") + std::to_string(i) + "}";
  many += "]}";
  auto bounded = decode_published_node(many);
  REQUIRE(bounded);
  CHECK(bounded->ranks_left_out == (1LL << 40));
}

TEST_CASE("a text cut to its bound never ends inside a UTF-8 character") {
  PublishedNode n;
  n.host = std::string(kMaxPublishedHost - 1, 'h') + "\xC3\xA9";  // é across the bound
  n.ranks.push_back({0, 0, 1, std::string(kMaxPublishedText - 1, 's') + "\xE6\x97\xA5", 1, 0, ""});
  auto back = decode_published_node(encode_published_node(n));
  REQUIRE(back);
  CHECK(back->host == std::string(kMaxPublishedHost - 1, 'h'));
  CHECK(back->ranks[0].state == std::string(kMaxPublishedText - 1, 's'));
}

TEST_CASE("merge: a remote rank is never shown running on a guess") {
  // After a success every rank exited; after a failure, or from a record that stopped changing
  // (its node, or the store this node reads it from, gone), nobody knows.
  CHECK(shown_remote_state("running", false, 0.5, JobEnd::No) == "running");
  CHECK(shown_remote_state("running", true, 0.5, JobEnd::No) == "lost");
  CHECK(shown_remote_state("running", false, 0.5, JobEnd::Succeeded) == "exited");
  CHECK(shown_remote_state("running", false, 0.5, JobEnd::Failed) == "unknown");
  CHECK(shown_remote_state("running", false, kStaleRecordS + 1, JobEnd::No) == "unknown");
  CHECK(shown_remote_state("exited", false, kStaleRecordS + 1, JobEnd::Failed) == "exited");
  std::vector<RemoteNodeView> stale{{1, "b", false, two_ranks(), kStaleRecordS + 1}};
  CHECK(merge_job_ranks(json::array(), 0, "a", stale)[0]["state"] == "unknown");
  CHECK(job_nodes_json(0, "a", 0, stale)[1]["state"] == "unknown");
  std::vector<RemoteNodeView> fresh{{1, "b", false, two_ranks(), 1}};
  CHECK(merge_job_ranks(json::array(), 0, "a", fresh, JobEnd::Succeeded)[0]["state"] == "exited");
  CHECK(job_nodes_json(0, "a", 0, fresh)[1]["state"] == "up");
  // Node 1 claiming rank 0, which this node runs: listed once, as this node says.
  PublishedNode claims = two_ranks();
  claims.ranks[0].rank = 0;
  std::vector<RemoteNodeView> clash{{1, "b", false, claims, 1}};
  json local = json::array({{{"rank", 0}, {"local_rank", 0}, {"state", "running"}}});
  json merged = merge_job_ranks(local, 0, "a", clash);
  REQUIRE(merged.size() == 2);
  CHECK(merged[0]["host"] == "a");
  CHECK(merged[1]["rank"] == 3);
}

TEST_CASE("steps history: rates from samples, a restart starts again, bounded") {
  StepHistory h(5, 2);
  CHECK_FALSE(h.rate(0, 0));
  h.note(0, 0, 10, 100.0);
  CHECK_FALSE(h.rate(0, 0));
  h.note(0, 0, 30, 102.0);
  CHECK(*h.rate(0, 0) == doctest::Approx(10.0));
  h.note(0, 0, 5, 103.0);  // a restart
  CHECK_FALSE(h.rate(0, 0));
  for (int i = 0; i < 20; ++i) h.note(0, 0, 5 + i, 104.0 + i);
  json j = h.json(124.0);
  CHECK(j["keep"] == 5);
  REQUIRE(j["ranks"].size() == 1);
  CHECK(j["ranks"][0]["samples"].size() == 5);
  CHECK(j["ranks"][0]["samples"][4][0] == doctest::Approx(1.0));  // age of the newest
  CHECK(j["ranks"][0]["samples"][4][1] == 24);
  h.note(1, 2, 1, 1.0);
  h.note(1, 3, 1, 1.0);  // beyond max_ranks: not kept
  CHECK(h.ranks() == 2);
}

#include "launcher/health/failure_log.hpp"

TEST_CASE("failures: kept across attempts, the last ones, each cut to its bounds") {
  FailureLog log(2);
  RankFailure f{0,
                1,
                1,
                "1",
                std::string(5000, 'm'),
                "head" + std::string(20000, 't') + "END",
                std::vector<std::string>(30, std::string(600, 'e'))};
  log.add(f);
  json j = log.json();
  REQUIRE(j.size() == 1);
  CHECK(j[0]["message"].get<std::string>().size() == kMaxFailureMessage);
  const auto tb = j[0]["traceback"].get<std::string>();
  CHECK(tb.size() == kMaxFailureTraceback);
  CHECK(tb.ends_with("END"));  // the raising frame is kept
  CHECK(j[0]["stderr_tail"].size() == kMaxFailureTailLines);
  CHECK(j[0]["stderr_tail"][0].get<std::string>().size() == kMaxFailureTailLine);
  log.add({1, 2, 0, "SIGSEGV", "second", "", {}});
  log.add({2, 3, 1, "7", "third", "", {}});
  j = log.json();
  REQUIRE(j.size() == 2);
  CHECK(j[0]["attempt"] == 1);
  CHECK(j[1]["message"] == "third");
  CHECK(log.dropped() == 1);
}

TEST_CASE("a node's failures travel in its record, bounded, and merge into every node's list") {
  PublishedNode n = two_ranks();
  for (int a = 0; a < 6; ++a) {
    n.failures.push_back({a, 3, 1, "1", "ValueError: attempt " + std::to_string(a),
                          "Traceback (most recent call last):\n" + std::string(10000, 't') + "END",
                          std::vector<std::string>(30, std::string(600, 'e'))});
  }
  n.failures_left_out = 2;  // dropped by the node's own log
  const std::string text = encode_published_node(n);
  CHECK(text.size() <= kMaxPublishedBytes);
  auto back = decode_published_node(text);
  REQUIRE(back);
  // The newest ones, oldest first; the rest counted.
  REQUIRE(back->failures.size() == kMaxPublishedFailures);
  CHECK(back->failures.front().attempt == 2);
  CHECK(back->failures.back().message == "ValueError: attempt 5");
  CHECK(back->failures_left_out == 2 + 2);
  const auto& f = back->failures.back();
  CHECK(f.rank == 3);
  CHECK(f.traceback.size() == kMaxPublishedTraceback);
  CHECK(f.traceback.ends_with("END"));  // the raising frame is kept
  CHECK(f.stderr_tail.size() == kMaxPublishedTailLines);
  CHECK(f.stderr_tail[0].size() == kMaxPublishedTailLine);

  // A record with huge escaped texts stays within its bound: fewer failures, counted.
  PublishedNode wide = two_ranks();
  for (int a = 0; a < 4; ++a) {
    wide.failures.push_back({a, 2, 0, "1", std::string(5000, '\x01'), std::string(20000, '\x02'),
                             std::vector<std::string>(20, std::string(600, '\x03'))});
  }
  const std::string wide_text = encode_published_node(wide);
  CHECK(wide_text.size() <= kMaxPublishedBytes);
  auto wide_back = decode_published_node(wide_text);
  REQUIRE(wide_back);
  CHECK(wide_back->failures.size() + static_cast<size_t>(wide_back->failures_left_out) == 4);
  CHECK_FALSE(wide_back->failures.empty());

  // Merged: this node's failure and the other node's, by attempt, then node rank.
  RemoteNodeView b{1, "b", false, *back, 0.5};
  json local = json::array({{{"attempt", 3}, {"rank", 0}, {"message", "here"}}});
  json merged = merge_job_failures(local, 0, "host-a", {b});
  REQUIRE(merged.size() == 5);
  CHECK(merged[0]["attempt"] == 2);
  CHECK(merged[1]["message"] == "here");
  CHECK(merged[1]["node_rank"] == 0);
  CHECK(merged[2]["attempt"] == 3);
  CHECK(merged[2]["node_rank"] == 1);
  CHECK(merged[2]["host"] == "host-b");
  CHECK(merged[2]["remote"] == true);
  CHECK(merged[4]["message"] == "ValueError: attempt 5");
  CHECK(remote_failures_left_out({b}) == 4);
}

TEST_CASE("a record's failures are read with the writer's bounds, odd ones skipped") {
  json j{{"host", "b"},
         {"ranks", json::array()},
         {"failures_left_out", -5},
         {"failures",
          json::array({json("x"),
                       {{"rank", "1"}, {"attempt", 0}},
                       {{"rank", 1}},
                       {{"rank", 2},
                        {"attempt", 1},
                        {"message", std::string(3000, 'm')},
                        {"traceback", 7},
                        {"stderr_tail", json::array({1, "line", std::string(900, 'l')})}}})}};
  auto back = decode_published_node(j.dump());
  REQUIRE(back);
  CHECK(back->failures_left_out == 0);
  REQUIRE(back->failures.size() == 1);
  const auto& f = back->failures[0];
  CHECK(f.rank == 2);
  CHECK(f.message.size() == kMaxPublishedMessage);
  CHECK(f.traceback.empty());
  REQUIRE(f.stderr_tail.size() == 2);
  CHECK(f.stderr_tail[1].size() == kMaxPublishedTailLine);
}

TEST_CASE("steps history: the ranks gone from the job leave it at once") {
  StepHistory h(5, 3);
  h.note(0, 0, 1, 1.0);
  h.note(0, 1, 1, 1.0);
  h.note(1, 2, 1, 1.0);
  // A re-form without node 1: its rank's series goes, and its room is free for a new rank.
  h.keep_only({{0, 0}, {0, 1}});
  json j = h.json(2.0);
  REQUIRE(j["ranks"].size() == 2);
  CHECK(j["ranks"][1]["rank"] == 1);
  h.note(2, 2, 1, 2.0);
  h.note(2, 3, 1, 2.0);  // beyond max_ranks
  CHECK(h.ranks() == 3);
  CHECK(h.rate(2, 2) == std::nullopt);
  h.keep_only({});
  CHECK(h.ranks() == 0);
}

TEST_CASE("a failure keeps the node rank it had when it failed (a restart renumbers nodes)") {
  PublishedNode n = two_ranks();
  RankFailure f{0, 3, 1, "1", "ValueError: x", "", {}};
  f.node_rank = 1;  // it failed as node 1; the restart made its node node 0
  n.failures.push_back(f);
  auto back = decode_published_node(encode_published_node(n));
  REQUIRE(back);
  REQUIRE(back->failures.size() == 1);
  CHECK(back->failures[0].node_rank == 1);
  json merged = merge_job_failures(json::array({{{"attempt", 0}, {"rank", 0}, {"node_rank", 1}}}),
                                   1, "a", {RemoteNodeView{0, "b", false, *back, 0.1}});
  REQUIRE(merged.size() == 2);
  CHECK(merged[0]["node_rank"] == 1);  // this node's, as numbered then
  CHECK(merged[1]["node_rank"] == 1);
  CHECK(merged[1]["rank"] == 3);
}

TEST_CASE("each rank's CPU% and memory travel in the record, bounded; shown only while it runs") {
  auto n = two_ranks();
  n.ranks[0].cpu_percent = 97.25;
  n.ranks[0].rss_bytes = 157286400;
  n.ranks[1].cpu_percent = 3.0;  // an exited rank's last numbers: not shown
  n.ranks[1].rss_bytes = 1000;
  auto back = decode_published_node(encode_published_node(n));
  REQUIRE(back);
  CHECK(back->ranks[0].cpu_percent == doctest::Approx(97.3));
  CHECK(back->ranks[0].rss_bytes == 157286400);
  auto merged = merge_job_ranks(json::array(), 0, "a", {{1, "b", false, *back, 0.5}});
  REQUIRE(merged.size() == 2);
  CHECK(merged[0]["cpu_percent"].get<double>() == doctest::Approx(97.3));
  CHECK(merged[0]["rss_bytes"] == 157286400);
  CHECK(merged[1]["cpu_percent"].is_null());
  CHECK(merged[1]["rss_bytes"].is_null());
  // A lost node's numbers are old: not shown either.
  merged = merge_job_ranks(json::array(), 0, "a", {{1, "b", true, *back, 0.5}});
  CHECK(merged[0]["cpu_percent"].is_null());
  // Whatever a stranger writes: absent, never out of bounds.
  auto odd = decode_published_node(
      R"({"ranks":[{"rank":0,"cpu":-1,"rss":-5},{"rank":1,"cpu":1e300,"rss":1e300},
         {"rank":2,"cpu":"50","rss":"9"},{"rank":3,"cpu":12.5,"rss":4096}]})");
  REQUIRE(odd);
  REQUIRE(odd->ranks.size() == 4);
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(odd->ranks[i].cpu_percent);
    CHECK_FALSE(odd->ranks[i].rss_bytes);
  }
  CHECK(odd->ranks[3].cpu_percent == doctest::Approx(12.5));
  CHECK(odd->ranks[3].rss_bytes == 4096);
  // An agent writes none beyond the bounds either.
  n.ranks[0].cpu_percent = kMaxPublishedCpuPercent * 2;
  n.ranks[0].rss_bytes = -1;
  back = decode_published_node(encode_published_node(n));
  REQUIRE(back);
  CHECK_FALSE(back->ranks[0].cpu_percent);
  CHECK_FALSE(back->ranks[0].rss_bytes);
}

TEST_CASE(
    "UsageMeter: CPU% from two readings of one process; a new pid or a gone one starts over") {
  UsageMeter meter(100, 4096);  // 100 ticks a second, 4 KiB pages
  meter.reset(2);
  meter.note(0, 10, 1000, 256, 50.0);
  meter.note(1, 11, 0, 1024, 50.0);
  CHECK_FALSE(meter.usage(0).cpu_percent);  // one reading: no rate yet
  CHECK(meter.usage(0).rss_bytes == 256 * 4096);
  meter.note(0, 10, 1090, 512, 51.0);  // 0.9 s of CPU in 1 s
  meter.note(1, 11, 2, 1024, 51.0);    // idle
  CHECK(meter.usage(0).cpu_percent == doctest::Approx(90.0));
  CHECK(meter.usage(0).rss_bytes == 512 * 4096);
  CHECK(meter.usage(1).cpu_percent == doctest::Approx(2.0));
  meter.note(0, 10, 1490, 512, 53.0);  // two threads busy for 2 s
  CHECK(meter.usage(0).cpu_percent == doctest::Approx(200.0));
  meter.note(0, 12, 5, 100, 54.0);  // restarted: another process, its first reading
  CHECK_FALSE(meter.usage(0).cpu_percent);
  CHECK(meter.usage(0).rss_bytes == 100 * 4096);
  meter.note(1, 11, std::nullopt, std::nullopt, 54.0);  // gone
  CHECK(meter.usage(1) == RankUsage{});
  meter.note(5, 1, 1, 1, 54.0);  // no such local rank: ignored
  CHECK(meter.usage(5) == RankUsage{});
}

TEST_CASE("failures under the decided root cause: the root first, the others caused by it") {
  // Node 0: rank 0 failed on its own first (this node's first failure), rank 1 after it; then the
  // job-wide decision says node 1's stop came first: both are consequences of node 1's rank 3.
  FailureLog here;
  RankFailure first{0, 0, 0, "1", "RuntimeError: peer closed", "", {}};
  first.node_rank = 0;
  first.root_cause = true;
  here.add(first);
  RankFailure second{0, 1, 1, "1", "RuntimeError: peer closed", "", {}};
  second.node_rank = 0;
  second.cause_node = 0;
  second.cause_rank = 0;
  here.add(second);
  RankFailure older{-1, 1, 1, "1", "", "", {}};  // another attempt: not touched
  older.attempt = 7;
  older.node_rank = 0;
  older.root_cause = true;
  here.add(older);
  here.settle(0, AttemptCause{1, -1, "node 1 (b): rank 3 (pid 42) failed with exit code 3"});
  CHECK_FALSE(here.kept()[0].root_cause);
  CHECK(here.kept()[0].cause_node == 1);
  CHECK(here.kept()[0].cause_rank == -1);
  CHECK(here.kept()[1].cause_node == 1);
  CHECK(here.kept()[2].root_cause);
  // Node 1's record: its rank 3 is the root cause of attempt 0.
  PublishedNode b = two_ranks();
  RankFailure root{0, 3, 1, "3", "ValueError: loss is NaN", "", {}};
  root.node_rank = 1;
  root.root_cause = true;
  b.failures.push_back(root);
  auto back = decode_published_node(encode_published_node(b));
  REQUIRE(back);
  REQUIRE(back->failures.size() == 1);
  CHECK(back->failures[0].root_cause);
  auto merged = merge_job_failures(here.json(), 0, "a", {{1, "b", false, *back, 0.5}});
  REQUIRE(merged.size() == 4);
  // Attempt 0: node 1's root cause first, then node 0's consequences, its rank resolved.
  CHECK(merged[0]["rank"] == 3);
  CHECK(merged[0]["root_cause"] == true);
  CHECK(merged[0]["caused_by"].is_null());
  for (int i : {1, 2}) {
    CHECK(merged[i]["node_rank"] == 0);
    CHECK(merged[i]["root_cause"] == false);
    CHECK(merged[i]["caused_by"]["node_rank"] == 1);
    CHECK(merged[i]["caused_by"]["rank"] == 3);
    CHECK(merged[i]["caused_by"]["text"].get<std::string>().find("rank 3") != std::string::npos);
  }
  CHECK(merged[3]["attempt"] == 7);
  // A consequence travels in a record too, its cause bounded.
  PublishedNode a;
  RankFailure big = here.kept()[0];
  big.cause = std::string(100000, 'c');
  a.failures.push_back(big);
  auto read = decode_published_node(encode_published_node(a));
  REQUIRE(read);
  REQUIRE(read->failures.size() == 1);
  CHECK(read->failures[0].cause_node == 1);
  CHECK(read->failures[0].cause.size() <= kMaxFailureCause);
  CHECK_FALSE(read->failures[0].root_cause);
}

TEST_CASE("a rank ddprun stopped is published and merged as stopped") {
  auto n = two_ranks();
  n.ranks[1].stopped = true;
  auto back = decode_published_node(encode_published_node(n));
  REQUIRE(back);
  CHECK_FALSE(back->ranks[0].stopped);
  CHECK(back->ranks[1].stopped);
  auto merged = merge_job_ranks(json::array(), 0, "a", {{1, "b", false, *back, 0.5}});
  CHECK(merged[0]["stopped_by_ddprun"] == false);
  CHECK(merged[1]["stopped_by_ddprun"] == true);
}

TEST_CASE("this node's decision places another node's failures: no second root cause") {
  // Node 0 published rank 0's failure as its root cause before it learned that node 1's stop came
  // first (its last record did not reach node 1 before the end). Node 1 decided: its rank 3.
  FailureLog here;
  RankFailure mine{0, 3, 1, "3", "ValueError: loss is NaN", "", {}};
  mine.node_rank = 1;
  mine.root_cause = true;
  here.add(mine);
  PublishedNode zero;
  zero.host = "a";
  RankFailure theirs{0, 0, 0, "1", "RuntimeError: peer closed", "", {}};
  theirs.node_rank = 0;
  theirs.root_cause = true;  // its tentative decision
  zero.failures.push_back(theirs);
  std::map<int, AttemptCause> decided{{0, AttemptCause{1, 3, "node 1 (b): rank 3 failed"}}};
  auto merged = merge_job_failures(here.json(), 1, "b", {{0, "a", false, zero, 0.5}}, decided);
  REQUIRE(merged.size() == 2);
  CHECK(merged[0]["rank"] == 3);
  CHECK(merged[0]["root_cause"] == true);
  CHECK(merged[1]["rank"] == 0);
  CHECK(merged[1]["root_cause"] == false);
  CHECK(merged[1]["caused_by"]["node_rank"] == 1);
  CHECK(merged[1]["caused_by"]["rank"] == 3);
  // Without the decision both would claim the root (the published record as it came).
  auto undecided = merge_job_failures(here.json(), 1, "b", {{0, "a", false, zero, 0.5}});
  CHECK(undecided[0]["root_cause"] == true);
  CHECK(undecided[1]["root_cause"] == true);
}
