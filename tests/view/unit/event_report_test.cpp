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
