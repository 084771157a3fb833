// SPDX-License-Identifier: MIT
// Where the store lives, how agents meet, and the rendezvous' layout in the worker environment.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "launcher/env/worker_env.hpp"
#include "launcher/multinode/multinode_settings.hpp"
#include "launcher/multinode/node_session.hpp"

using namespace ddp::launcher;

namespace {
LaunchConfig nodes(int n, int rank, std::string addr = "127.0.0.1") {
  LaunchConfig c;
  c.nnodes = {n, n};
  c.node_rank = rank;
  c.nproc_per_node = 2;
  c.master_addr = std::move(addr);
  c.master_port = 29500;
  c.run_id = "job";
  return c;
}
}  // namespace

TEST_CASE("store plan: who hosts, and on which address") {
  CHECK(plan_store(nodes(1, 0)).role == StoreRole::Host);
  CHECK(plan_store(nodes(1, 0)).bind_address == "127.0.0.1");  // loopback for one node
  CHECK(plan_store(nodes(2, 0)).role == StoreRole::Host);
  CHECK(plan_store(nodes(2, 1)).role == StoreRole::Client);
  CHECK(plan_store(nodes(2, 0, "10.1.2.3")).bind_address == "10.1.2.3");
  // Issue 8 item 17: a name is bound as given (the store resolves it), not every interface...
  CHECK(plan_store(nodes(2, 0, "head-node")).bind_address == "head-node");
  LaunchConfig everywhere = nodes(2, 0, "head-node");
  everywhere.rdzv_conf = {{"store_bind", "0.0.0.0"}};  // ...unless asked
  CHECK(plan_store(everywhere).bind_address == "0.0.0.0");
  CHECK(multinode_settings(everywhere, std::nullopt, "h"));
  CHECK(plan_store(nodes(2, 0, "localhost")).bind_address == "127.0.0.1");
  LaunchConfig c = nodes(2, 0);
  c.rdzv_backend = "c10d";
  c.rdzv_endpoint = "127.0.0.5:1234";
  REQUIRE(apply_rdzv_endpoint(c));
  CHECK(c.master_addr == "127.0.0.5");
  CHECK(c.master_port == 1234);
  CHECK(plan_store(c).role == StoreRole::TryHost);
  c.rdzv_endpoint = "127.0.0.5";
  REQUIRE(apply_rdzv_endpoint(c));
  CHECK(c.master_port == 29400);  // torchrun's c10d default
}

TEST_CASE("rendezvous settings from --rdzv_conf and the token variable") {
  LaunchConfig c = nodes(3, 2);
  c.rdzv_conf = {
      {"join_timeout", "7"}, {"heartbeat_timeout", "2.5"}, {"heartbeat_interval", "0.5"}};
  auto s = multinode_settings(c, std::string("envtoken"), "host-a");
  REQUIRE(s);
  CHECK(s->join_timeout == std::chrono::milliseconds(7000));
  CHECK(s->heartbeat_timeout == std::chrono::milliseconds(2500));
  CHECK(s->token == "envtoken");
  CHECK(s->node_rank == 2);
  CHECK(!s->dynamic);
  c.rdzv_conf["token"] = "conf";
  CHECK(multinode_settings(c, std::string("envtoken"), "h")->token == "conf");  // --rdzv_conf wins
  c.rdzv_conf = {{"colour", "blue"}};
  CHECK(multinode_settings(c, std::nullopt, "h").error().message.find("unknown key 'colour'") !=
        std::string::npos);
  c.rdzv_conf = {{"heartbeat_interval", "5"}, {"heartbeat_timeout", "2"}};
  CHECK(!multinode_settings(c, std::nullopt, "h"));
  c.rdzv_conf = {};
  c.nnodes = {1, 3};
  CHECK(!multinode_settings(c, std::nullopt, "h"));  // MIN:MAX needs c10d
  c.rdzv_backend = "c10d";
  auto dynamic = multinode_settings(c, std::nullopt, "h");
  REQUIRE(dynamic);
  CHECK(dynamic->dynamic);
  CHECK(dynamic->node_rank == -1);
  CHECK(needs_rendezvous(c));
  CHECK(!needs_rendezvous(nodes(1, 0)));
}

TEST_CASE("the rendezvous' layout drives RANK, WORLD_SIZE and GROUP_*") {
  LaunchConfig c = nodes(2, 0);
  GroupLayout layout{1, 3, 5, 9};  // node 1 of 3, ranks 5.. of 9 (local sizes differ)
  auto env = worker_environment(c, {1, 0, 29500, "e"}, {}, layout);
  CHECK(env.at("RANK") == "6");
  CHECK(env.at("WORLD_SIZE") == "9");
  CHECK(env.at("GROUP_RANK") == "1");
  CHECK(env.at("GROUP_WORLD_SIZE") == "3");
  CHECK(env.at("LOCAL_WORLD_SIZE") == "2");
}

TEST_CASE("stop reasons carry the root cause's exit code and node rank") {
  auto r = decode_stop_reason(encode_stop_reason({7, 1, "node 1 (b): rank 2 | odd", {}}));
  CHECK(r.exit_code == 7);
  CHECK(r.node_rank == 1);
  CHECK(r.text == "node 1 (b): rank 2 | odd");
  auto plain = decode_stop_reason("plain words");
  CHECK(plain.exit_code == 1);
  CHECK(plain.node_rank == -1);
  CHECK(plain.text == "plain words");
  // An agent that sends no node rank: the text after the code is kept whole.
  auto old = decode_stop_reason("3|node 2 (c): rank 5 failed");
  CHECK(old.exit_code == 3);
  CHECK(old.node_rank == -1);
  CHECK(old.text == "node 2 (c): rank 5 failed");
  // Whoever wrote the record cannot make the job end in success or with a code outside 1..255.
  CHECK(decode_stop_reason("0|1|all good").exit_code == 1);
  CHECK(decode_stop_reason("300|1|big").exit_code == 1);
}

TEST_CASE("the rendezvous token never reaches a worker's environment (issue 8 item 16)") {
  LaunchConfig c = nodes(2, 0);
  EnvMap parent{{"DDPRUN_RDZV_TOKEN", "s3cret"},
                {"PET_RDZV_CONF", "join_timeout=5, token = s3cret ,heartbeat_timeout=3"},
                {"PATH", "/bin"}};
  EnvMap env = worker_environment(c, {0, 0, 29500, "e"}, parent);
  CHECK(env.count("DDPRUN_RDZV_TOKEN") == 0);
  CHECK(env.at("PET_RDZV_CONF") == "join_timeout=5,heartbeat_timeout=3");
  CHECK(env.at("PATH") == "/bin");
  parent["PET_RDZV_CONF"] = "token=s3cret";
  CHECK(worker_environment(c, {0, 0, 29500, "e"}, parent).count("PET_RDZV_CONF") == 0);
}

TEST_CASE("settings that must agree across nodes, by flag name (issue 8 item 18)") {
  LaunchConfig c = nodes(2, 1);
  c.max_restarts = 3;
  c.role = "trainer";
  auto s = multinode_settings(c, std::nullopt, "h");
  REQUIRE(s);
  auto value = [&](const std::string& name) {
    for (const auto& [k, v] : s->must_agree) {
      if (k == name) return v;
    }
    return std::string("(absent)");
  };
  CHECK(value("--max_restarts") == "3");
  CHECK(value("--role") == "trainer");
  CHECK(value("--nnodes") == "2:2");
  CHECK(value("--rdzv_conf heartbeat_timeout") == "5s");
  CHECK(value("--rdzv_conf join_timeout") == "600s");
  CHECK(value("--nproc_per_node") == "(absent)");     // nodes may run different worker counts
  CHECK(value("--rdzv_conf max_rescales") == "100");  // elastic budget: every node counts the same
}

TEST_CASE("--rdzv_backend etcd: members, key prefix, the workers' store, what is refused") {
  LaunchConfig c = nodes(2, 0);
  c.nnodes = {1, 3};
  c.rdzv_endpoint = "10.0.0.1:2379,10.0.0.2:2379,10.0.0.3";
  c.local_addr = "10.0.0.7";
  c.rdzv_conf = {{"etcd_prefix", "/team"}};
  for (const char* backend : {"etcd", "etcd-v2"}) {  // torchrun's two names, one meaning
    c.rdzv_backend = backend;
    auto s = multinode_settings(c, std::nullopt, "host-a");
    REQUIRE(s);
    CHECK(s->etcd.on);
    CHECK(s->dynamic);
    CHECK(s->etcd.endpoints == c.rdzv_endpoint);
    CHECK(s->etcd.prefix == "/team");
    CHECK(s->etcd.store_address == "10.0.0.7");      // what the other nodes' workers connect to
    CHECK(plan_store(c).role == StoreRole::Client);  // no job-wide store: a round's node 0 serves
    CHECK(needs_rendezvous(c));
    const auto& agreed = s->must_agree;
    CHECK(std::find(agreed.begin(), agreed.end(),
                    std::pair<std::string, std::string>{"--rdzv_backend", "etcd"}) !=
          agreed.end());  // the two names agree with each other
  }
  auto refused = [&](std::map<std::string, std::string> conf, std::string endpoint,
                     const std::string& says) {
    LaunchConfig bad = c;
    bad.rdzv_conf = std::move(conf);
    bad.rdzv_endpoint = std::move(endpoint);
    auto s = multinode_settings(bad, std::nullopt, "h");
    REQUIRE_FALSE(s);
    CHECK(s.error().exit_code == 2);
    CHECK_MESSAGE(s.error().message.find(says) != std::string::npos, s.error().message);
  };
  refused({{"etcd_prefix", "team"}}, c.rdzv_endpoint, "must start with '/'");
  refused({{"etcd_cacert", "/nonexistent/ca.pem"}}, c.rdzv_endpoint,
          "cannot load the CA file '/nonexistent/ca.pem'");
  refused({{"etcd_cert", "/c.pem"}}, c.rdzv_endpoint, "go together");  // no key
  refused({{"protocol", "ftp"}}, c.rdzv_endpoint, "not one of http, https");
  refused({{"etcd_user", "root"}}, c.rdzv_endpoint, "go together");  // no password file
  refused({{"etcd_password", "pw"}}, c.rdzv_endpoint, "etcd_password_file=PATH");
  refused({{"etcd_user", "root"}, {"etcd_password_file", "/nonexistent/pw"}}, c.rdzv_endpoint,
          "cannot read '/nonexistent/pw'");
  {
    const std::string path = "/tmp/ddprun_unit_etcd_pw_" + std::to_string(::getpid());
    {
      std::ofstream f(path);
      f << "s3cret  \nignored second line\n";
    }
    LaunchConfig good = c;
    good.rdzv_conf = {{"etcd_user", "root"}, {"etcd_password_file", path}};
    auto s = multinode_settings(good, std::nullopt, "h");
    std::remove(path.c_str());
    REQUIRE(s);
    CHECK(s->etcd.user == "root");
    CHECK(s->etcd.password == "s3cret");  // the first line, trailing spaces removed
  }
  refused({}, "10.0.0.1:2379,:5", "--rdzv_endpoint: ':5' has no host");
  LaunchConfig none = c;
  none.rdzv_endpoint.clear();
  CHECK(apply_rdzv_endpoint(none).error().message.find("needs --rdzv_endpoint") !=
        std::string::npos);
}

TEST_CASE("--rdzv_conf max_rescales: a whole number, default 100") {
  LaunchConfig c = nodes(2, 1);
  CHECK(multinode_settings(c, std::nullopt, "h")->max_rescales == 100);
  c.rdzv_conf["max_rescales"] = "3";
  CHECK(multinode_settings(c, std::nullopt, "h")->max_rescales == 3);
  c.rdzv_conf["max_rescales"] = "-1";
  auto bad = multinode_settings(c, std::nullopt, "h");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().exit_code == 2);
  CHECK(bad.error().message.find("max_rescales") != std::string::npos);
}

TEST_CASE("a re-form that admits pending nodes carries their pending numbers in the stop record") {
  StopReason admit{74, 0, "admitting 1 pending node | x", {0, 1}, {5, 12}};
  auto r = decode_stop_reason(encode_stop_reason(admit));
  CHECK(r.survivors == std::vector<int>{0, 1});
  CHECK(r.admitted == std::vector<std::int64_t>{5, 12});
  CHECK(r.text == "admitting 1 pending node | x");
  // Without newcomers the record is what it was.
  CHECK(encode_stop_reason({74, 2, "lost node 1", {0, 2}, {}}) == "74|2|rescale=0,2|lost node 1");
  // A malformed list is left in the text, not half-read.
  auto odd = decode_stop_reason("74|0|rescale=0,1|admit=x|words");
  CHECK(odd.admitted.empty());
  CHECK(odd.text == "admit=x|words");
}

TEST_CASE("--rdzv_conf admit: now (default) or restart; --exclude-hosts naming this node") {
  LaunchConfig c = nodes(2, 1);
  CHECK(multinode_settings(c, std::nullopt, "h")->admit_at_once);
  c.rdzv_conf["admit"] = "restart";
  CHECK_FALSE(multinode_settings(c, std::nullopt, "h")->admit_at_once);
  c.rdzv_conf["admit"] = "later";
  auto bad = multinode_settings(c, std::nullopt, "h");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "--rdzv_conf admit: 'later' is not one of now, restart");
  c.rdzv_conf.erase("admit");
  c.exclude_hosts = {"g", "h"};
  auto self = multinode_settings(c, std::nullopt, "h");
  REQUIRE_FALSE(self);
  CHECK(self.error().exit_code == 69);
  CHECK(self.error().message == "host 'h' is excluded from this job (--exclude-hosts)");
  auto other = multinode_settings(c, std::nullopt, "k");
  REQUIRE(other);
  CHECK(other->excluded_hosts == std::vector<std::string>{"g", "h"});
}

TEST_CASE("c10d without --rdzv_id: the fingerprint is the program's content, never its args") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("ddprun-fp-{}", ::getpid());
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  auto write = [](const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  };
  write(dir / "a" / "train.py", "print('project a')\n");
  write(dir / "b" / "train.py", "print('project b')\n");
  write(dir / "a" / "copy.py", "print('project a')\n");

  LaunchConfig c = nodes(2, 0);
  c.rdzv_backend = "c10d";
  c.nnodes = {1, 2};
  c.node_rank = -1;
  c.program_kind = ProgramKind::PythonScript;
  c.program = (dir / "a" / "train.py").string();
  c.program_args = {"--out", "/scratch/node0"};
  auto s = multinode_settings(c, std::nullopt, "h");
  REQUIRE(s.ok());
  CHECK(s->default_id_command == command_fingerprint(c));
  CHECK(s->default_id_command.rfind("train.py ", 0) == 0);            // the file name, then a hash
  CHECK(s->default_id_command.find("scratch") == std::string::npos);  // no argument in the store

  LaunchConfig other_node = c;  // another node of the job passes its own arguments: one job
  other_node.program_args = {"--out", "/scratch/node1"};
  CHECK(command_fingerprint(other_node) == command_fingerprint(c));
  auto hash = [](const std::string& fingerprint) {
    return fingerprint.substr(fingerprint.rfind(' ') + 1);
  };
  LaunchConfig same_content = c;  // the same script under another name (a copy, a symlink)
  same_content.program = (dir / "a" / "copy.py").string();
  CHECK(hash(command_fingerprint(same_content)) == hash(command_fingerprint(c)));
  LaunchConfig other_project = c;  // another project's train.py: another program
  other_project.program = (dir / "b" / "train.py").string();
  CHECK(hash(command_fingerprint(other_project)) != hash(command_fingerprint(c)));
  LaunchConfig module = c;  // -m: the module's name
  module.program_kind = ProgramKind::PythonModule;
  module.program = "pkg.train";
  LaunchConfig other_module = module;
  other_module.program = "pkg.eval";
  CHECK(hash(command_fingerprint(module)) != hash(command_fingerprint(other_module)));
  LaunchConfig on_path = c;  // not a file here (exec finds it on PATH): its name
  on_path.program_kind = ProgramKind::Executable;
  on_path.program = "no-such-program-here";
  CHECK(command_fingerprint(on_path).rfind("no-such-program-here ", 0) == 0);

  c.run_id = "job42";  // an explicit id: a late node of that id is a spare, no check
  c.run_id_given = true;
  auto explicit_id = multinode_settings(c, std::nullopt, "h");
  REQUIRE(explicit_id.ok());
  CHECK(explicit_id->default_id_command.empty());
  c.run_id = "none";  // --rdzv_id none or PET_RDZV_ID=none typed: explicit too
  auto explicit_none = multinode_settings(c, std::nullopt, "h");
  REQUIRE(explicit_none.ok());
  CHECK(explicit_none->default_id_command.empty());
  fs::remove_all(dir);
}
