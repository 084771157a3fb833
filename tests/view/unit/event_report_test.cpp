// SPDX-License-Identifier: MIT
// `ddprun report`'s pure part: reading an events file's text, the digest, HTML and Markdown.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include "launcher/view/event_report.hpp"

using namespace ddp::launcher::view;

namespace {

const char* kFailedRun =
    R"ev({"event":"launch","time":100.0,"run_id":"r1","program":"train.py","nnodes":1,"node_rank":0,"world_size":2}
{"event":"worker_start","time":100.5,"rank":0,"local_rank":0,"attempt":0,"pid":11}
{"event":"worker_start","time":100.5,"rank":1,"local_rank":1,"attempt":0,"pid":12}
{"event":"worker_exit","time":102.0,"rank":1,"local_rank":1,"attempt":0,"pid":12,"exit_code":3,"terminated_by_ddprun":false,"oom_killed":false}
{"event":"worker_exit","time":102.5,"rank":0,"local_rank":0,"attempt":0,"pid":11,"signal":"SIGTERM","signal_number":15,"terminated_by_ddprun":true,"oom_killed":false}
{"event":"summary","time":103.0,"exit_code":3,"end":"worker_failed","attempts":[{"attempt":0,"root_cause_rank":1,"workers":[{"rank":1,"local_rank":1,"exit_code":3,"error_message":"ValueError: bad batch"}]}]}
)ev";

}  // namespace

TEST_CASE("a failed run: its root cause, its failure, each rank's time and exit") {
  auto parsed = report_of_text(kFailedRun);
  REQUIRE(parsed);
  CHECK(parsed->event_count == 6);
  const auto& r = *parsed;
  CHECK(r.run_id == "r1");
  CHECK(r.exit_code == 3);
  CHECK(r.root_cause ==
        "rank 1 (local rank 1, attempt 0) exited with code 3: ValueError: bad batch");
  REQUIRE(r.failures.size() == 1);  // rank 0 was stopped by ddprun: not a failure
  REQUIRE(r.runs.size() == 2);
  CHECK(*r.runs[1].end - r.runs[1].start == doctest::Approx(1.5));
  auto md = report_markdown(r, "ev.jsonl");
  CHECK(md.find("**Root cause:** rank 1 (local rank 1, attempt 0) exited with code 3") !=
        std::string::npos);
  CHECK(md.find("| 0 | 0 | 0 | 11 | +0.50 s | 2.00 s | SIGTERM (stopped by ddprun) |") !=
        std::string::npos);
  auto html = report_html(r, "ev.jsonl");
  CHECK(html.find("data-event=\"worker_exit\"") != std::string::npos);
  CHECK(html.find("<script") == std::string::npos);
}

TEST_CASE("a truncated last line is dropped; garbage elsewhere is an error naming its line") {
  std::string cut = std::string(kFailedRun) + R"ev({"event":"worker_st)ev";
  auto parsed = report_of_text(cut);
  REQUIRE(parsed);
  CHECK(parsed->truncated);
  CHECK(parsed->event_count == 6);
  CHECK(parsed->root_cause.find("rank 1") == 0);

  auto bad = report_of_text("{\"event\":\"launch\"}\nnot json\n{\"event\":\"summary\"}\n");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().exit_code == kReportDataError);
  CHECK(bad.error().message == "line 2 is not an event (a JSON object with \"event\")");
  CHECK_FALSE(report_of_text(""));
  CHECK_FALSE(report_of_text("[1,2]\n"));
}

TEST_CASE("no summary: the root cause says the events stop early; a success says none") {
  auto running = report_of_text(R"ev({"event":"launch","time":1,"run_id":"x"}
)ev");
  REQUIRE(running);
  CHECK(running->root_cause.find("unknown") == 0);
  auto ok = report_of_text(R"ev({"event":"summary","time":1,"exit_code":0,"attempts":[]}
)ev");
  REQUIRE(ok);
  CHECK(ok->root_cause == "none: the job succeeded");
}

TEST_CASE("a multi-node root cause and the membership and hang sections") {
  auto parsed = report_of_text(
      R"ev({"event":"rendezvous","time":1,"attempt":0,"node_rank":0,"num_nodes":2,"world_size":4,"nodes":[]}
{"event":"node_lost","time":2,"node_rank":1,"message":"lost node 1 (b)"}
{"event":"rescale","time":3,"attempt":1,"change":"spare","reason":"lost node 1 (b)","old_world_size":4,"new_world_size":4}
{"event":"hang","time":4,"source":"heartbeat","attempt":1}
{"event":"stacks_saved","time":5,"files":["/tmp/r/attempt_1/0/stacks.txt"]}
{"event":"summary","time":6,"exit_code":75,"end":"hung","job_root_cause":"node 0 (a): hung: no progress for 3 s"}
)ev");
  REQUIRE(parsed);
  const auto& r = *parsed;
  CHECK(r.root_cause == "node 0 (a): hung: no progress for 3 s");
  CHECK(r.membership.total() == 2);
  CHECK(r.hangs.total() == 2);
  auto md = report_markdown(r, "e");
  CHECK(md.find("stacks saved: /tmp/r/attempt_1/0/stacks.txt") != std::string::npos);
  auto html = report_html(r, "<e>");
  CHECK(html.find("&lt;e&gt;") != std::string::npos);  // escaped
  CHECK(html.find("data-event=\"rescale\"") != std::string::npos);
}

TEST_CASE("a job that failed once and recovered: the failure and its message are shown") {
  auto r = report_of_text(
      R"ev({"event":"launch","time":1,"run_id":"r","program":"t.py","argv":["t.py","--api-key","hunter2"],"nnodes":1,"node_rank":0,"world_size":1}
{"event":"worker_start","time":2,"rank":0,"local_rank":0,"attempt":0,"pid":5}
{"event":"worker_exit","time":3,"rank":0,"local_rank":0,"attempt":0,"pid":5,"exit_code":1,"terminated_by_ddprun":false,"oom_killed":false}
{"event":"restart","time":3.5,"attempt":1}
{"event":"worker_start","time":4,"rank":0,"local_rank":0,"attempt":1,"pid":6}
{"event":"worker_exit","time":5,"rank":0,"local_rank":0,"attempt":1,"pid":6,"exit_code":0,"terminated_by_ddprun":false,"oom_killed":false}
{"event":"summary","time":6,"exit_code":0,"attempts":[{"attempt":0,"root_cause_rank":0,"workers":[{"rank":0,"local_rank":0,"exit_code":1,"error_message":"RuntimeError: NCCL timeout","error_traceback":"Traceback (most recent call last):\n  File \"t.py\""}]},{"attempt":1,"workers":[{"rank":0,"local_rank":0,"exit_code":0}]}]}
)ev");
  REQUIRE(r);
  CHECK(r->root_cause ==
        "none: the job succeeded after 1 failed attempt(s); the last failure: rank 0 (local rank "
        "0, attempt 0) exited with code 1: RuntimeError: NCCL timeout");
  REQUIRE(r->attempt_failures.size() == 1);
  CHECK(r->failures.total() == 1);  // the exit 0 is no failure
  const auto md = report_markdown(*r, "e");
  CHECK(md.find("RuntimeError: NCCL timeout") != std::string::npos);
  CHECK(md.find("Traceback (most recent call last)") != std::string::npos);
  const auto html = report_html(*r, "e");
  CHECK(html.find("class=\"traceback\"") != std::string::npos);
  // The command line is not in the report (as /status leaves it out): secrets live in argv.
  CHECK(md.find("hunter2") == std::string::npos);
  CHECK(html.find("hunter2") == std::string::npos);
  // The rank's exit 0 is drawn with the attempts (green), not in the failures' lane (red).
  const auto exit0 = html.find("attempt 1");
  CHECK(exit0 != std::string::npos);
  size_t red = 0;
  for (size_t at = html.find("fill=\"#b3261e\""); at != std::string::npos;
       at = html.find("fill=\"#b3261e\"", at + 1))
    ++red;
  CHECK(red == 1);  // the exit 1 only
}

TEST_CASE("wrong-typed fields and deep nesting are bad lines with their number, never a crash") {
  auto typed = report_of_text(
      "{\"event\":\"launch\",\"time\":1}\n{\"event\":\"worker_start\",\"rank\":\"0\"}\n");
  REQUIRE_FALSE(typed);
  CHECK(typed.error().exit_code == kReportDataError);
  CHECK(typed.error().message == "line 2: \"rank\" is a string, not a number");
  auto null_time = report_of_text("{\"event\":\"launch\",\"time\":null}\n");
  REQUIRE_FALSE(null_time);
  CHECK(null_time.error().message == "line 1: \"time\" is null, not a number");
  auto nested_summary = report_of_text(
      "{\"event\":\"summary\",\"exit_code\":1,\"attempts\":[{\"attempt\":0,\"root_cause_rank\":"
      "\"x\"}]}\n");
  REQUIRE_FALSE(nested_summary);
  CHECK(nested_summary.error().message.find("line 1:") == 0);
  const std::string deep =
      "{\"event\":\"x\",\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}\n";
  auto d = report_of_text("{\"event\":\"launch\"}\n" + deep);
  REQUIRE_FALSE(d);
  CHECK(d.error().exit_code == kReportDataError);
  CHECK(d.error().message == "line 2 is nested deeper than 64 levels: not an event");
  // Other types where an event has a list: shown, not thrown.
  auto odd = report_of_text("{\"event\":\"stacks_saved\",\"files\":\"one\"}\n");
  REQUIRE(odd);
  CHECK(report_markdown(*odd, "e").find("stacks saved") != std::string::npos);
}

TEST_CASE("the lists a report keeps are bounded: the first and the last, and a count between") {
  std::string text = "{\"event\":\"launch\",\"time\":1}\n";
  for (int i = 0; i < 5000; ++i) {
    text += fmt::format(
        "{{\"event\":\"worker_start\",\"time\":{},\"rank\":0,\"attempt\":{},\"pid\":1}}\n"
        "{{\"event\":\"worker_exit\",\"time\":{},\"rank\":0,\"attempt\":{},\"exit_code\":1}}\n",
        2 + i, i, 2.5 + i, i);
  }
  auto r = report_of_text(text);
  REQUIRE(r);
  CHECK(r->event_count == 10001);
  CHECK(r->events.size() == 2 * kReportKeep);
  CHECK(r->runs.size() == 2 * kReportKeep);
  CHECK(r->runs.total() == 5000);
  CHECK(r->runs[2 * kReportKeep - 1].exit == "1");  // the last run's exit found its run
  // Every attempt failed: the first and the last 1,000 grouped, the count of the others between.
  REQUIRE(r->attempt_failures.size() == 2 * kReportKeep);
  CHECK(r->attempt_failures_left_out == 3000);
  CHECK(r->attempt_failures[kReportKeep].attempt == 4000);
  const auto md = report_markdown(*r, "e");
  CHECK(md.find("- attempt 999: rank 0 (local rank ?) exited with code 1 (root cause)\n- ... 3000 "
                "more left out") != std::string::npos);
  CHECK(report_markdown(*r, "e").find("left out of the report") != std::string::npos);
}

TEST_CASE("job text in the Markdown report is inert: no raw HTML, link or image renders") {
  auto r = report_of_text(
      R"ev({"event":"launch","time":1,"run_id":"<b>r</b>","program":"<img src=x onerror=alert(4)>","nnodes":1,"node_rank":0,"world_size":1}
{"event":"worker_start","time":2,"rank":0,"local_rank":0,"attempt":0,"pid":5}
{"event":"worker_exit","time":3,"rank":0,"local_rank":0,"attempt":0,"pid":5,"exit_code":1,"terminated_by_ddprun":false,"oom_killed":false}
{"event":"summary","time":6,"exit_code":1,"attempts":[{"attempt":0,"root_cause_rank":0,"workers":[{"rank":0,"local_rank":0,"exit_code":1,"error_message":"<script>alert(2)</script> [click](javascript:alert(3)) ![t](http://evil.example/t.png) &amp; `x`"}]}]}
)ev");
  REQUIRE(r);
  const auto md = report_markdown(*r, "e");
  // The message block stays in a code block (raw there); outside it nothing is raw.
  const auto block = md.find("### Failed attempts");
  REQUIRE(block != std::string::npos);
  const auto outside = md.substr(0, block);
  CHECK(outside.find('<') == std::string::npos);
  for (auto at = outside.find("]("); at != std::string::npos; at = outside.find("](", at + 1))
    CHECK(outside[at - 1] == '\\');  // an escaped ] opens no link
  CHECK(outside.find("![") == std::string::npos);
  CHECK(outside.find("&lt;img src=x onerror=alert(4)&gt;") != std::string::npos);
  CHECK(outside.find("&lt;script&gt;alert(2)&lt;/script&gt; \\[click\\](javascript:alert(3)) "
                     "\\!\\[t\\](http://evil.example/t.png) &amp;amp; \\`x\\`") !=
        std::string::npos);
  CHECK(outside.find("## ddprun report: job &lt;b&gt;r&lt;/b&gt;") != std::string::npos);
}

TEST_CASE("controls shown as ^[ and ^] open no Markdown link (breaker of 2026-12-07)") {
  // ESC and GS were made visible after the brackets were escaped: `^[click here^](https://…)`
  // rendered as a link in the root cause line, the stopped ranks' lines and the heading.
  auto r = report_of_text(
      R"ev({"event":"launch","time":1,"run_id":"\u001bjob\u001d(https://evil.example/r)","program":"p","nnodes":1,"node_rank":0,"world_size":2}
{"event":"worker_start","time":2,"rank":0,"local_rank":0,"attempt":0,"pid":5}
{"event":"worker_start","time":2,"rank":1,"local_rank":1,"attempt":0,"pid":6}
{"event":"worker_exit","time":3,"rank":0,"local_rank":0,"attempt":0,"pid":5,"exit_code":1,"terminated_by_ddprun":false,"oom_killed":false}
{"event":"worker_exit","time":4,"rank":1,"local_rank":1,"attempt":0,"pid":6,"signal":15,"terminated_by_ddprun":true,"oom_killed":false}
{"event":"summary","time":6,"exit_code":1,"attempts":[{"attempt":0,"root_cause_rank":0,"cause":"\u001bcause\u001d(https://evil.example/c)","workers":[{"rank":0,"local_rank":0,"exit_code":1,"error_message":"\u001bclick here\u001d(https://evil.example/x)"},{"rank":1,"local_rank":1,"signal":15,"terminated_by_ddprun":true,"error_message":"\u001bstopped\u001d(https://evil.example/s)"}]}]}
)ev");
  REQUIRE(r);
  const auto md = report_markdown(*r, "e");
  const auto block = md.find("```");  // code blocks stay literal; no link forms there
  const auto outside = block == std::string::npos ? md : md.substr(0, block);
  CHECK(outside.find("evil.example") != std::string::npos);
  for (auto at = outside.find("]("); at != std::string::npos; at = outside.find("](", at + 1))
    CHECK(outside[at - 1] == '\\');  // an escaped ] opens no link
  CHECK(outside.find('\x1b') == std::string::npos);
}

TEST_CASE("ranks past the bound are counted once, seen in their exit and in the summary") {
  // Breaker of 2026-12-07: 100 ranks, rank 5 failed: "... and 72 more rank(s)" instead of 36.
  std::string text =
      R"({"event":"launch","time":1,"run_id":"r","program":"p","nnodes":1,"node_rank":0,"world_size":100})"
      "\n";
  std::string workers;
  for (int r = 0; r < 100; ++r) {
    const std::string exit = r == 5 ? R"("exit_code":1,"terminated_by_ddprun":false)"
                                    : R"("signal":15,"terminated_by_ddprun":true)";
    text += fmt::format(
        R"({{"event":"worker_exit","time":2,"rank":{},"local_rank":{},"attempt":0,"pid":{},{},"oom_killed":false}})"
        "\n",
        r, r, 100 + r, exit);
    workers += fmt::format(R"({}{{"rank":{},"local_rank":{},{}}})", r ? "," : "", r, r, exit);
  }
  text += fmt::format(
      R"({{"event":"summary","time":3,"exit_code":1,"attempts":[{{"attempt":0,"root_cause_rank":5,"workers":[{}]}}]}})"
      "\n",
      workers);
  auto r = report_of_text(text);
  REQUIRE(r);
  REQUIRE(r->attempt_failures.size() == 1);
  const auto& f = r->attempt_failures[0];
  CHECK(f.stopped.size() + f.stopped_left_out == 99);  // every rank but the cause, once
}

TEST_CASE("an integer a field cannot hold is a wrong-typed field, not wrapped") {
  auto big_rank = report_of_text(
      "{\"event\":\"launch\",\"time\":1}\n"
      "{\"event\":\"worker_start\",\"attempt\":0,\"rank\":2147483648,\"local_rank\":0,\"pid\":1}"
      "\n");
  REQUIRE_FALSE(big_rank);
  CHECK(big_rank.error().exit_code == kReportDataError);
  CHECK(big_rank.error().message == "line 2: \"rank\" is 2147483648, not a whole number in range");
  auto big_attempt = report_of_text(
      "{\"event\":\"worker_start\",\"attempt\":4294967295,\"rank\":0,\"local_rank\":0,\"pid\":1}"
      "\n");
  REQUIRE_FALSE(big_attempt);
  CHECK(big_attempt.error().message.find("line 1: \"attempt\" is 4294967295") == 0);
  auto fraction = report_of_text("{\"event\":\"worker_start\",\"rank\":1.5}\n");
  REQUIRE_FALSE(fraction);
  CHECK(fraction.error().exit_code == kReportDataError);
  auto fine = report_of_text(
      "{\"event\":\"worker_start\",\"attempt\":0,\"rank\":2147483647,\"local_rank\":0,\"pid\":1}"
      "\n");
  CHECK(fine);
}

namespace {

RankEnd end_of(int rank, const std::string& exit, bool stopped, double time,
               const std::string& message = "") {
  return RankEnd{rank, std::to_string(rank), exit, stopped, false, time, message, ""};
}

/// Where `what` is in `text` (checked to be there).
size_t position(const std::string& text, const std::string& what) {
  const auto at = text.find(what);
  INFO(what);
  CHECK(at != std::string::npos);
  return at;
}

// Rank 2 fails with a message; ddprun stops rank 0 (SIGTERM) and rank 1 fails on its own after
// it (a collective whose peer died); attempt 1 succeeds. The summary lists the attempts out of
// order; the error message holds an OSC title and a CSI clear.
const char* kRecovered =
    R"ev({"event":"launch","time":10,"run_id":"g","program":"t.py","nnodes":1,"node_rank":0,"world_size":3}
{"event":"worker_start","time":11,"rank":0,"local_rank":0,"attempt":0,"pid":20}
{"event":"worker_start","time":11,"rank":1,"local_rank":1,"attempt":0,"pid":21}
{"event":"worker_start","time":11,"rank":2,"local_rank":2,"attempt":0,"pid":22}
{"event":"worker_exit","time":12,"rank":2,"local_rank":2,"attempt":0,"pid":22,"exit_code":3,"terminated_by_ddprun":false,"oom_killed":false}
{"event":"worker_exit","time":12.1,"rank":1,"local_rank":1,"attempt":0,"pid":21,"exit_code":1,"terminated_by_ddprun":false,"oom_killed":false}
{"event":"worker_exit","time":12.2,"rank":0,"local_rank":0,"attempt":0,"pid":20,"signal":"SIGTERM","signal_number":15,"terminated_by_ddprun":true,"oom_killed":false}
{"event":"restart","time":12.5,"attempt":1,"failed_rank":2}
{"event":"worker_start","time":13,"rank":0,"local_rank":0,"attempt":1,"pid":30}
{"event":"worker_start","time":13,"rank":1,"local_rank":1,"attempt":1,"pid":31}
{"event":"worker_start","time":13,"rank":2,"local_rank":2,"attempt":1,"pid":32}
{"event":"worker_exit","time":14,"rank":0,"local_rank":0,"attempt":1,"pid":30,"exit_code":0,"terminated_by_ddprun":false,"oom_killed":false}
{"event":"worker_exit","time":14,"rank":1,"local_rank":1,"attempt":1,"pid":31,"exit_code":0,"terminated_by_ddprun":false,"oom_killed":false}
{"event":"worker_exit","time":14,"rank":2,"local_rank":2,"attempt":1,"pid":32,"exit_code":0,"terminated_by_ddprun":false,"oom_killed":false}
{"event":"summary","time":15,"exit_code":0,"attempts":[{"attempt":1,"workers":[{"rank":0,"local_rank":0,"exit_code":0}]},{"attempt":0,"root_cause_rank":2,"cause":"rank 2 failed with exit code 3","workers":[{"rank":0,"local_rank":0,"signal":"SIGTERM","terminated_by_ddprun":true},{"rank":1,"local_rank":1,"exit_code":1,"error_message":"RuntimeError: Connection closed by peer"},{"rank":2,"local_rank":2,"exit_code":3,"error_message":"ValueError: bad batch \u001b]0;owned\u0007\u001b[2J","error_traceback":"Traceback (most recent call last):\n  File \"t.py\", line 9"}]}]}
)ev";

}  // namespace

TEST_CASE("group_attempts: the root cause first, the other ranks' ends under it, oldest first") {
  std::map<int, AttemptRecord> attempts;
  // Added newest first: the order of the file does not matter.
  attempts[3] = AttemptRecord{
      3, std::nullopt, "", {end_of(0, "1", false, 9), end_of(1, "SIGTERM", true, 8)}, 0};
  attempts[2] = AttemptRecord{2, std::nullopt, "", {}, 0};  // no failure: left out
  // The decision names rank 5, which has no exit in the events (ddprun killed before it).
  attempts[1] = AttemptRecord{1, 5, "", {end_of(1, "SIGTERM", true, 4)}, 0};
  attempts[0] = AttemptRecord{0,
                              2,
                              "rank 2 failed with exit code 3",
                              {end_of(1, "1", false, 2.1), end_of(0, "SIGTERM", true, 2.2),
                               end_of(2, "3", false, 2, "bad")},
                              7};
  // Another node's failure: no rank of this node is the cause, its words are.
  attempts[4] = AttemptRecord{4,
                              std::nullopt,
                              "node 1 (b): rank 3 failed with exit code 1",
                              {end_of(0, "SIGTERM", true, 10)},
                              0};
  const auto g = group_attempts(attempts);
  REQUIRE(g.size() == 4);
  CHECK(g[0].attempt == 0);
  REQUIRE(g[0].root);
  CHECK(g[0].root->rank == 2);
  CHECK(g[0].text() == "rank 2 (local rank 2, attempt 0) exited with code 3: bad");
  REQUIRE(g[0].stopped.size() == 2);  // by rank, the failure after the cause among them
  CHECK(g[0].stopped[0].rank == 0);
  CHECK(g[0].stopped[1].rank == 1);
  CHECK(g[0].stopped_left_out == 7);
  CHECK(g[0].because() == "rank 2");
  CHECK(g[1].attempt == 1);
  REQUIRE(g[1].root);
  CHECK(g[1].root->rank == 5);
  CHECK(g[1].root->how() == "has no exit in the events");
  CHECK(g[1].stopped.size() == 1);
  // No decision in the events (ddprun killed): the first rank that failed on its own.
  CHECK(g[2].attempt == 3);
  REQUIRE(g[2].root);
  CHECK(g[2].root->rank == 0);
  CHECK(g[2].stopped.size() == 1);
  CHECK(g[3].attempt == 4);
  CHECK_FALSE(g[3].root);
  CHECK(g[3].because() == "node 1 (b): rank 3 failed with exit code 1");
  CHECK(g[3].text() == "attempt 4: node 1 (b): rank 3 failed with exit code 1");
}

TEST_CASE("a job that failed once and recovered: attempt 0's cause, then the ranks it stopped") {
  auto r = report_of_text(kRecovered);
  REQUIRE(r);
  CHECK(r->root_cause ==
        "none: the job succeeded after 1 failed attempt(s); the last failure: rank 2 (local rank "
        "2, attempt 0) exited with code 3: ValueError: bad batch \x1b]0;owned\x07\x1b[2J");
  REQUIRE(r->attempt_failures.size() == 1);
  const auto& f = r->attempt_failures[0];
  REQUIRE(f.root);
  CHECK(f.root->traceback.find("line 9") != std::string::npos);
  REQUIRE(f.stopped.size() == 2);
  CHECK(f.stopped[1].message == "RuntimeError: Connection closed by peer");

  const auto md = report_markdown(*r, "e");
  const auto cause =
      position(md, "- attempt 0: rank 2 (local rank 2) exited with code 3 (root cause)");
  const auto message = position(md, "\n  ValueError: bad batch");  // its code block
  const auto under = position(md, "  stopped because of rank 2:\n");
  const auto rank0 =
      position(md, "  - rank 0 (local rank 0) was killed by SIGTERM (stopped by ddprun)\n");
  const auto rank1 = position(
      md,
      "  - rank 1 (local rank 1) exited with code 1: RuntimeError: Connection closed by peer\n");
  CHECK(cause < message);
  CHECK(message < under);
  CHECK(under < rank0);
  CHECK(rank0 < rank1);
  CHECK(md.find("attempt 1:") == std::string::npos);  // it succeeded: no failure to list
  // The message's escapes are shown, never sent to the terminal raw (the report's sanitiser).
  CHECK(md.find('\x1b') == std::string::npos);
  CHECK(md.find('\x07') == std::string::npos);

  const auto html = report_html(*r, "e");
  const auto root = position(html,
                             "<span class=\"root\" data-rank=\"2\">rank 2 (local rank 2) exited "
                             "with code 3</span> (root cause)");
  const auto stopped = position(html, "<p>stopped because of rank 2:</p>");
  CHECK(root < stopped);
  position(html,
           "<li class=\"consequence\" data-rank=\"0\">rank 0 (local rank 0) was killed by "
           "SIGTERM (stopped by ddprun)</li>");
  position(html,
           "<li class=\"consequence\" data-rank=\"1\">rank 1 (local rank 1) exited with code "
           "1: RuntimeError: Connection closed by peer</li>");
  CHECK(html.find('\x1b') == std::string::npos);
}

TEST_CASE("grouping from hostile files: attempts out of order, no summary, a cause with no exit") {
  // Attempt 1's lines before attempt 0's; no summary (ddprun was killed); the restart names rank
  // 4, which has no worker_exit; rank 0's failure comes after rank 3's in attempt 1.
  auto r = report_of_text(
      R"ev({"event":"worker_exit","time":7,"rank":0,"local_rank":0,"attempt":1,"exit_code":6}
{"event":"worker_exit","time":6,"rank":3,"local_rank":3,"attempt":1,"signal":"SIGKILL"}
{"event":"worker_exit","time":6.5,"rank":1,"local_rank":1,"attempt":1,"signal":"SIGTERM","terminated_by_ddprun":true}
{"event":"restart","time":5,"attempt":1,"failed_rank":4}
{"event":"worker_exit","time":4,"rank":2,"local_rank":2,"attempt":0,"signal":"SIGTERM","terminated_by_ddprun":true}
{"event":"worker_exit","time":2,"rank":5,"local_rank":5,"attempt":2,"exit_code":0}
)ev");
  REQUIRE(r);
  REQUIRE(r->attempt_failures.size() == 2);  // attempt 2 ended well
  const auto& a0 = r->attempt_failures[0];
  CHECK(a0.attempt == 0);
  REQUIRE(a0.root);
  CHECK(a0.root->rank == 4);
  CHECK(a0.root->exit.empty());
  REQUIRE(a0.stopped.size() == 1);
  CHECK(a0.stopped[0].rank == 2);
  const auto& a1 = r->attempt_failures[1];
  REQUIRE(a1.root);
  CHECK(a1.root->rank == 3);  // the first to fail on its own
  CHECK(a1.root->how() == "was killed by SIGKILL");
  REQUIRE(a1.stopped.size() == 2);
  CHECK(a1.stopped[0].rank == 0);
  CHECK(a1.stopped[1].rank == 1);
  const auto md = report_markdown(*r, "e");
  CHECK(md.find("- attempt 0: rank 4 (local rank ?) has no exit in the events (root cause)") !=
        std::string::npos);
  CHECK(md.find("- attempt 1: rank 3 (local rank 3) was killed by SIGKILL (root cause)") !=
        std::string::npos);
  CHECK(r->root_cause.find("unknown") == 0);
}
