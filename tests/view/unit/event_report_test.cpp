// SPDX-License-Identifier: MIT
// `ddprun report`'s pure part: reading an events file's text, the digest, HTML and Markdown.
#include <doctest/doctest.h>

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
  auto parsed = parse_events_text(kFailedRun);
  REQUIRE(parsed);
  CHECK(parsed->events.size() == 6);
  auto r = digest_events(*parsed);
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
  auto parsed = parse_events_text(cut);
  REQUIRE(parsed);
  CHECK(parsed->truncated);
  CHECK(parsed->events.size() == 6);
  CHECK(digest_events(*parsed).root_cause.find("rank 1") == 0);

  auto bad = parse_events_text("{\"event\":\"launch\"}\nnot json\n{\"event\":\"summary\"}\n");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().exit_code == kReportDataError);
  CHECK(bad.error().message == "line 2 is not an event (a JSON object with \"event\")");
  CHECK_FALSE(parse_events_text(""));
  CHECK_FALSE(parse_events_text("[1,2]\n"));
}

TEST_CASE("no summary: the root cause says the events stop early; a success says none") {
  auto running = parse_events_text(R"ev({"event":"launch","time":1,"run_id":"x"}
)ev");
  REQUIRE(running);
  CHECK(digest_events(*running).root_cause.find("unknown") == 0);
  auto ok = parse_events_text(R"ev({"event":"summary","time":1,"exit_code":0,"attempts":[]}
)ev");
  REQUIRE(ok);
  CHECK(digest_events(*ok).root_cause == "none: the job succeeded");
}

TEST_CASE("a multi-node root cause and the membership and hang sections") {
  auto parsed = parse_events_text(
      R"ev({"event":"rendezvous","time":1,"attempt":0,"node_rank":0,"num_nodes":2,"world_size":4,"nodes":[]}
{"event":"node_lost","time":2,"node_rank":1,"message":"lost node 1 (b)"}
{"event":"rescale","time":3,"attempt":1,"change":"spare","reason":"lost node 1 (b)","old_world_size":4,"new_world_size":4}
{"event":"hang","time":4,"source":"heartbeat","attempt":1}
{"event":"stacks_saved","time":5,"files":["/tmp/r/attempt_1/0/stacks.txt"]}
{"event":"summary","time":6,"exit_code":75,"end":"hung","job_root_cause":"node 0 (a): hung: no progress for 3 s"}
)ev");
  REQUIRE(parsed);
  auto r = digest_events(*parsed);
  CHECK(r.root_cause == "node 0 (a): hung: no progress for 3 s");
  CHECK(r.membership.size() == 2);
  CHECK(r.hangs.size() == 2);
  auto md = report_markdown(r, "e");
  CHECK(md.find("stacks saved: /tmp/r/attempt_1/0/stacks.txt") != std::string::npos);
  auto html = report_html(r, "<e>");
  CHECK(html.find("&lt;e&gt;") != std::string::npos);  // escaped
  CHECK(html.find("data-event=\"rescale\"") != std::string::npos);
}
