// SPDX-License-Identifier: MIT
// Health flags and torchrun's variables; the Prometheus text format.
#include <doctest/doctest.h>

#include "launcher/health/health_options.hpp"
#include "launcher/health/prometheus_text.hpp"

using namespace ddp::launcher::health;
using namespace std::chrono_literals;

TEST_CASE("defaults: no hang verdict, no endpoint, no file timer") {
  auto s = health_settings_from(RawHealthOptions{}, {});
  REQUIRE(s);
  CHECK(s->hang_timeout == 0ms);
  CHECK(s->hang_startup_timeout == 60s);
  CHECK(s->no_progress_restarts == 2);
  CHECK(s->straggler_ratio == 0.5);
  CHECK_FALSE(s->status_port);
  CHECK_FALSE(s->file_timer);
  CHECK(s->status_addr == "127.0.0.1");
}

TEST_CASE("torchrun's variables: file timer, its path, the health check port") {
  auto s = health_settings_from(RawHealthOptions{}, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"},
                                                     {"TORCHELASTIC_TIMER_FILE", "/tmp/t"},
                                                     {"TORCHELASTIC_HEALTH_CHECK_PORT", "0"}});
  REQUIRE(s);
  CHECK(s->file_timer);
  CHECK(s->timer_file == "/tmp/t");
  CHECK(s->status_port == 0);
  // Only "1" enables it, as in torchrun; the flag wins over the variable for the port.
  RawHealthOptions raw;
  raw.status_port = "9100";
  auto t = health_settings_from(
      raw, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "true"}, {"TORCHELASTIC_HEALTH_CHECK_PORT", "1"}});
  REQUIRE(t);
  CHECK_FALSE(t->file_timer);
  CHECK(t->status_port == 9100);
}

TEST_CASE("bad values are one-line usage errors naming the flag or variable") {
  auto bad = [](RawHealthOptions raw, std::map<std::string, std::string> env = {}) {
    auto s = health_settings_from(raw, env);
    REQUIRE_FALSE(s);
    CHECK(s.error().exit_code == 2);
    CHECK(s.error().message.find('\n') == std::string::npos);
    return s.error().message;
  };
  RawHealthOptions r;
  r.hang_timeout = "-1";
  CHECK(bad(r).starts_with("--hang-timeout"));
  r = {};
  r.hang_timeout = "0.01";
  CHECK(bad(r).find("at least 0.1") != std::string::npos);
  r = {};
  r.straggler_ratio = "1";
  CHECK(bad(r).starts_with("--straggler-ratio"));
  r = {};
  r.no_progress_restarts = "x";
  CHECK(bad(r).starts_with("--no-progress-restarts"));
  CHECK(bad(RawHealthOptions{}, {{"TORCHELASTIC_HEALTH_CHECK_PORT", "http"}})
            .starts_with("TORCHELASTIC_HEALTH_CHECK_PORT"));
  CHECK(bad(RawHealthOptions{}, {{"DDPRUN_STRAGGLER_WINDOW", "0"}})
            .starts_with("DDPRUN_STRAGGLER_WINDOW"));
}

TEST_CASE("Prometheus text: HELP and TYPE once per family, labels escaped, families in order") {
  PrometheusText m;
  m.family("a_total", "counter", "Things\nthat happened").sample({}, 3);
  auto& g = m.family("b", "gauge", "B");
  g.sample({{"rank", "0"}}, 1.5);
  g.sample({{"rank", "x\"y\\z\n"}}, 2);
  m.family("a_total", "counter", "ignored").sample({{"k", "v"}}, 4);
  CHECK(m.str() ==
        "# HELP a_total Things\\nthat happened\n# TYPE a_total counter\na_total "
        "3\na_total{k=\"v\"} 4\n"
        "# HELP b B\n# TYPE b gauge\nb{rank=\"0\"} 1.5\nb{rank=\"x\\\"y\\\\z\\n\"} 2\n");
}
