// SPDX-License-Identifier: MIT
// The --rdzv_conf key table (launcher/config/rdzv_conf.hpp): every key parses a good value into
// its field, every value that can be bad is one line with exit 2 naming the key, and --help and
// docs/flags.md list every key.
#include <doctest/doctest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "launcher/config/cli.hpp"
#include "launcher/config/rdzv_conf.hpp"
#include "launcher/multinode/multinode_settings.hpp"

using namespace ddp::launcher;

namespace {

/// A secret's file for token_file and etcd_password_file; removed at the end of the test.
struct SecretFile {
  std::string path = "/tmp/ddprun_unit_rdzv_conf_" + std::to_string(::getpid());
  SecretFile() { std::ofstream(path) << "s3cret \nsecond line\n"; }
  ~SecretFile() { std::remove(path.c_str()); }
};

}  // namespace

TEST_CASE("--rdzv_conf table: every key parses a good value into its field") {
  SecretFile secret;
  // One good value per key and what it must set. A key added to the table without a line here
  // fails the count below.
  using Check = bool (*)(const MultiNodeSettings&);
  const std::map<std::string, std::pair<std::string, Check>> good = {
      {"join_timeout",
       {"300", [](const MultiNodeSettings& s) { return s.join_timeout.count() == 300'000; }}},
      {"timeout",
       {"1.5", [](const MultiNodeSettings& s) { return s.join_timeout.count() == 1'500; }}},
      {"last_call_timeout",
       {"7", [](const MultiNodeSettings& s) { return s.last_call_timeout.count() == 7'000; }}},
      {"close_timeout", {"3", [](const MultiNodeSettings&) { return true; }}},
      {"read_timeout",
       {"9", [](const MultiNodeSettings& s) { return s.read_timeout.count() == 9'000; }}},
      {"heartbeat_interval",
       {"0.5", [](const MultiNodeSettings& s) { return s.heartbeat_interval.count() == 500; }}},
      {"heartbeat_timeout",
       {"8", [](const MultiNodeSettings& s) { return s.heartbeat_timeout.count() == 8'000; }}},
      {"refused_timeout",
       {"4", [](const MultiNodeSettings& s) { return s.refused_timeout.count() == 4'000; }}},
      {"token", {"t0k", [](const MultiNodeSettings& s) { return s.token == "t0k"; }}},
      {"token_file", {secret.path, [](const MultiNodeSettings& s) { return s.token == "s3cret"; }}},
      {"is_host", {"true", [](const MultiNodeSettings&) { return true; }}},
      {"store_bind",
       {"0.0.0.0", [](const MultiNodeSettings& s) { return s.etcd.store_bind == "0.0.0.0"; }}},
      {"max_rescales", {"3", [](const MultiNodeSettings& s) { return s.max_rescales == 3; }}},
      {"node_failure_limit",
       {"2", [](const MultiNodeSettings& s) { return s.node_failure_limit == 2; }}},
      {"admit", {"restart", [](const MultiNodeSettings& s) { return !s.admit_at_once; }}},
      {"spares", {"1", [](const MultiNodeSettings& s) { return s.spares; }}},
      {"etcd_prefix",
       {"/team", [](const MultiNodeSettings& s) { return s.etcd.prefix == "/team"; }}},
      {"etcd_user", {"root", [](const MultiNodeSettings& s) { return s.etcd.user == "root"; }}},
      {"etcd_password_file",
       {secret.path, [](const MultiNodeSettings& s) { return s.etcd.password == "s3cret"; }}},
      {"etcd_cacert",
       {"/ca.pem", [](const MultiNodeSettings& s) { return s.etcd.tls_ca == "/ca.pem"; }}},
      {"etcd_cert",
       {"/c.pem", [](const MultiNodeSettings& s) { return s.etcd.tls_cert == "/c.pem"; }}},
      {"etcd_key",
       {"/k.pem", [](const MultiNodeSettings& s) { return s.etcd.tls_key == "/k.pem"; }}},
      {"protocol", {"https", [](const MultiNodeSettings& s) { return s.etcd.tls; }}},
      {"cacert",
       {"/ca2.pem", [](const MultiNodeSettings& s) { return s.etcd.tls_ca == "/ca2.pem"; }}},
      {"cert",
       {"/c2.pem", [](const MultiNodeSettings& s) { return s.etcd.tls_cert == "/c2.pem"; }}},
      {"key", {"/k2.pem", [](const MultiNodeSettings& s) { return s.etcd.tls_key == "/k2.pem"; }}},
  };
  std::set<std::string> keys;
  for (const auto& entry : rdzv_conf_keys()) {
    const std::string key(entry.key);
    CAPTURE(key);
    CHECK(keys.insert(key).second);  // no key twice
    CHECK_FALSE(entry.doc.empty());
    CHECK(find_rdzv_conf_key(key) == &entry);
    if (key == "etcd_password") continue;  // refused whatever its value (below)
    REQUIRE(good.count(key) == 1);
    MultiNodeSettings s;
    auto applied = entry.apply("--rdzv_conf " + key, good.at(key).first, s);
    REQUIRE_MESSAGE(applied.ok(), applied.error().message);
    CHECK(good.at(key).second(s));
  }
  CHECK(keys.size() == good.size() + 1);
  CHECK(find_rdzv_conf_key("colour") == nullptr);
}

TEST_CASE("--rdzv_conf table: every bad value is one line, exit 2, naming the key") {
  // Keys whose value is free text (a token, an address, a file name read later) have no bad
  // value here; every other key has one line.
  const std::set<std::string> free_text = {"token",       "is_host",   "store_bind",
                                           "etcd_cacert", "etcd_cert", "etcd_key",
                                           "cacert",      "cert",      "key"};
  const std::map<std::string, std::pair<std::string, std::string>> bad = {
      {"join_timeout", {"soon", "'soon' is not a non-negative number of seconds"}},
      {"timeout", {"0", "must be positive"}},
      {"last_call_timeout", {"-1", "not a non-negative number"}},
      {"close_timeout", {"0", "must be positive"}},
      {"read_timeout", {"1e99", "seconds"}},
      {"heartbeat_interval", {"", "not a non-negative number"}},
      {"heartbeat_timeout", {"0", "must be positive"}},
      {"refused_timeout", {"x", "not a non-negative number"}},
      {"token_file", {"/nonexistent/token", "cannot read '/nonexistent/token'"}},
      {"max_rescales", {"-1", "out of range (0..1000000)"}},
      {"node_failure_limit", {"many", "is not a whole number"}},
      {"admit", {"later", "'later' is not one of now, restart"}},
      {"spares", {"2", "out of range (0..1)"}},
      {"etcd_prefix", {"team", "'team' must start with '/'"}},
      {"etcd_user", {"", "empty"}},
      {"etcd_password_file", {"/nonexistent/pw", "cannot read '/nonexistent/pw'"}},
      {"etcd_password", {"pw", "etcd_password_file=PATH"}},
      {"protocol", {"ftp", "'ftp' is not one of http, https"}},
  };
  for (const auto& entry : rdzv_conf_keys()) {
    const std::string key(entry.key);
    CAPTURE(key);
    if (free_text.count(key)) continue;
    REQUIRE(bad.count(key) == 1);
    MultiNodeSettings s;
    auto applied = entry.apply("--rdzv_conf " + key, bad.at(key).first, s);
    REQUIRE_FALSE(applied.ok());
    CHECK(applied.error().exit_code == 2);
    const std::string& message = applied.error().message;
    CHECK(message.rfind("--rdzv_conf " + key + ": ", 0) == 0);
    CHECK(message.find('\n') == std::string::npos);
    CHECK_MESSAGE(message.find(bad.at(key).second) != std::string::npos, message);
  }
  CHECK(bad.size() + free_text.size() == rdzv_conf_keys().size());
}

TEST_CASE("--rdzv_conf keys: multinode_settings() names them all for an unknown one") {
  LaunchConfig c;
  c.nnodes = {2, 2};
  c.rdzv_conf = {{"colour", "blue"}};
  auto s = multinode_settings(c, std::nullopt, "h");
  REQUIRE_FALSE(s);
  CHECK(s.error().exit_code == 2);
  for (const auto& entry : rdzv_conf_keys()) {
    CHECK_MESSAGE(s.error().message.find(std::string(entry.key)) != std::string::npos, entry.key);
  }
}

TEST_CASE("--rdzv_conf keys: --help and docs/flags.md list every one") {
  CLI::App app;
  RawOptions raw;
  add_launch_options(app, raw);
  const std::string help = app.help();
  std::ifstream file(DDP_DOCS_DIR "/flags.md");
  REQUIRE(file);
  std::string row;
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("| `--rdzv_conf", 0) == 0) row = line;
  }
  REQUIRE_FALSE(row.empty());
  for (const auto& entry : rdzv_conf_keys()) {
    const std::string key(entry.key);
    CAPTURE(key);
    CHECK(help.find(key) != std::string::npos);
    CHECK(row.find("`" + key + "`") != std::string::npos);
  }
}
