// SPDX-License-Identifier: MIT
// Command-line parsing and validation: both spellings, PET_ fallback, pass-through of program
// arguments, and every bad input of issue 2 with its exit code and message.
#include <doctest/doctest.h>
#include <stdlib.h>

#include "launcher/config/cli.hpp"
#include "launcher/config/did_you_mean.hpp"
#include "launcher/config/launch_config.hpp"

using namespace ddp::launcher;

namespace {

/// Sets an environment variable for one scope (CLI11 reads PET_* from the real environment).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

HostFacts cpu_host() {
  HostFacts h;
  h.cpu_count = 4;
  return h;
}

Result<ConfiguredLaunch> configure(const std::vector<std::string>& args,
                                   const HostFacts& host = cpu_host()) {
  auto parsed = parse_command_line(args);
  if (!parsed) return parsed.error();
  return config_from_options(parsed->raw, host);
}

void check_error(const std::vector<std::string>& args, int code, const std::string& needle,
                 const HostFacts& host = cpu_host()) {
  auto r = configure(args, host);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().exit_code == code);
  CHECK_MESSAGE(r.error().message.find(needle) != std::string::npos, r.error().message);
  CHECK(r.error().message.find('\n') == std::string::npos);  // one line
}

}  // namespace

TEST_CASE("both spellings of every multi-word flag are accepted") {
  for (auto [underscore, dash] :
       std::vector<std::pair<std::string, std::string>>{{"--nproc_per_node", "--nproc-per-node"},
                                                        {"--max_restarts", "--max-restarts"},
                                                        {"--master_port", "--master-port"},
                                                        {"--node_rank", "--node-rank"}}) {
    for (const auto& flag : {underscore, dash}) {
      auto r = configure({"--nnodes", "2", flag, "1", "train"});
      REQUIRE_MESSAGE(r.ok(), flag);
    }
  }
  auto a =
      configure({"--nproc_per_node=3", "--max-restarts=2", "--shutdown_timeout", "1.5", "train"});
  REQUIRE(a.ok());
  CHECK(a->config.nproc_per_node == 3);
  CHECK(a->config.max_restarts == 2);
  CHECK(a->config.shutdown_timeout.count() == 1500);
}

TEST_CASE("program arguments pass through untouched, even ones that look like ddprun flags") {
  auto r =
      configure({"--nproc_per_node", "2", "train.py", "--lr", "3", "--nproc_per_node", "9", "-m"});
  REQUIRE(r.ok());
  CHECK(r->config.program == "train.py");
  CHECK(r->config.program_kind == ProgramKind::PythonScript);
  CHECK(r->config.program_args ==
        std::vector<std::string>{"--lr", "3", "--nproc_per_node", "9", "-m"});
  CHECK(r->config.nproc_per_node == 2);
}

TEST_CASE("a repeated option takes its last value; -- separates the program") {
  auto r = configure({"--nproc_per_node", "2", "--nproc-per-node", "3", "--", "prog", "--", "x"});
  REQUIRE(r.ok());
  CHECK(r->config.nproc_per_node == 3);
  CHECK(r->config.program == "prog");
  CHECK(r->config.program_args == std::vector<std::string>{"--", "x"});
}

TEST_CASE("PET_ variables are a fallback and the command line wins") {
  ScopedEnv nproc("PET_NPROC_PER_NODE", "3");
  ScopedEnv restarts("PET_MAX_RESTARTS", "4");
  ScopedEnv standalone("PET_STANDALONE", "1");
  auto from_env = configure({"prog"});
  REQUIRE(from_env.ok());
  CHECK(from_env->config.nproc_per_node == 3);
  CHECK(from_env->config.max_restarts == 4);
  CHECK(from_env->config.standalone);
  auto cli_wins = configure({"--nproc-per-node", "2", "prog"});
  REQUIRE(cli_wins.ok());
  CHECK(cli_wins->config.nproc_per_node == 2);
}

TEST_CASE("how the program runs") {
  auto py = configure({"--python", "/opt/py", "a.py", "x"});
  REQUIRE(py.ok());
  CHECK(py->config.program_kind == ProgramKind::PythonScript);
  CHECK(py->config.python == "/opt/py");
  auto mod = configure({"-m", "pkg.main"});
  REQUIRE(mod.ok());
  CHECK(mod->config.program_kind == ProgramKind::PythonModule);
  auto bin = configure({"./worker"});
  REQUIRE(bin.ok());
  CHECK(bin->config.program_kind == ProgramKind::Executable);
  auto run_path = configure({"--run_path", "--no_python", "tool"});
  REQUIRE(run_path.ok());
  CHECK(run_path->config.program_kind == ProgramKind::PythonRunPath);  // torchrun: run_path wins
  auto nopy = configure({"--no_python", "thing.py"});
  REQUIRE(nopy.ok());
  CHECK(nopy->config.program_kind == ProgramKind::Executable);
  HostFacts host = cpu_host();
  host.python_exec = "/usr/bin/python3";
  auto env_py = configure({"a.py"}, host);
  REQUIRE(env_py.ok());
  CHECK(env_py->config.python == "/usr/bin/python3");
}

TEST_CASE("nproc_per_node gpu, cpu and auto") {
  HostFacts gpus = cpu_host();
  gpus.cuda_visible_devices = "1,GPU-8f3e,MIG-abc";
  auto g = configure({"--nproc_per_node", "gpu", "prog"}, gpus);
  REQUIRE(g.ok());
  CHECK(g->config.nproc_per_node == 3);
  auto a = configure({"--nproc_per_node", "auto", "prog"}, gpus);
  REQUIRE(a.ok());
  CHECK(a->config.nproc_per_node == 3);
  auto c = configure({"--nproc_per_node", "cpu", "prog"});
  REQUIRE(c.ok());
  CHECK(c->config.nproc_per_node == 4);
  auto auto_cpu = configure({"--nproc_per_node", "auto", "prog"});
  REQUIRE(auto_cpu.ok());
  CHECK(auto_cpu->config.nproc_per_node == 4);
  HostFacts driver = cpu_host();
  driver.driver_gpu_count = 2;
  auto d = configure({"--nproc_per_node", "gpu", "prog"}, driver);
  REQUIRE(d.ok());
  CHECK(d->config.nproc_per_node == 2);
  auto more = configure({"--nproc_per_node", "5", "prog"}, gpus);
  REQUIRE(more.ok());
  REQUIRE(!more->notices.empty());
  CHECK(more->notices[0].find("5 processes per node but only 3 visible GPU") != std::string::npos);
}

TEST_CASE("ports, master address and standalone") {
  auto single = configure({"prog"});
  REQUIRE(single.ok());
  CHECK(single->config.master_port == 0);  // a free port is chosen at launch
  CHECK(single->config.master_addr == "127.0.0.1");
  auto multi = configure({"--nnodes", "2", "prog"});
  REQUIRE(multi.ok());
  CHECK(multi->config.master_port == 29500);
  auto endpoint = configure({"--nnodes", "2", "--rdzv_endpoint", "node0:1234", "prog"});
  REQUIRE(endpoint.ok());
  CHECK(endpoint->config.master_addr == "node0");
  CHECK(endpoint->config.master_port == 1234);
  HostFacts host = cpu_host();
  host.fresh_run_id = "abc";
  auto standalone = configure({"--standalone", "prog"}, host);
  REQUIRE(standalone.ok());
  CHECK(standalone->config.run_id == "abc");
}

TEST_CASE("every bad input gives one line and its exit code") {
  check_error({"--bogus", "prog"}, 2, "unknown option '--bogus'");
  check_error({"--nproc_per_node", "0", "prog"}, 2, "must be at least 1");
  check_error({"--nproc_per_node", "-2", "prog"}, 2, "must be at least 1");
  check_error({"--nproc_per_node", "two", "prog"}, 2, "'two' is not a number");
  check_error({"--nproc_per_node", "gpu", "prog"}, 2, "no GPU found");
  HostFacts empty_cvd = cpu_host();
  empty_cvd.cuda_visible_devices = "";
  check_error({"--nproc_per_node", "gpu", "prog"}, 2, "no GPU is visible", empty_cvd);
  check_error({}, 2, "no program given");
  check_error({"--nproc_per_node", "2"}, 2, "no program given");
  check_error({"--nnodes", "2", "--node_rank", "2", "prog"}, 2,
              "must be less than the number of nodes");
  check_error({"--nnodes", "3:2", "prog"}, 2, "MIN > MAX");
  check_error({"--nnodes", "0", "prog"}, 2, "must be at least 1");
  check_error({"--nnodes", "a:b", "prog"}, 2, "not a number or range");
  check_error({"--master_port", "70000", "prog"}, 2, "out of range");
  check_error({"--master_port", "-1", "prog"}, 2, "out of range");  // 0 is valid: a free port
  check_error({"--master_port", "x", "prog"}, 2, "not a whole number");
  check_error({"--rdzv_endpoint", "h:99999", "prog"}, 2, "out of range");
  // The c10d store has no standby any more (issue 21): a second endpoint points to etcd.
  check_error({"--rdzv_endpoint", "a:1,b:2", "prog"}, 2,
              "--rdzv_endpoint: 'a:1,b:2' names more than one store, but the static store has no "
              "standby; for no single point of failure use --rdzv_backend etcd");
  check_error({"--rdzv_backend", "c10d", "--rdzv_endpoint", "a:1,b:2", "--nnodes", "2", "prog"}, 2,
              "the c10d store has no standby; for no single point of failure use --rdzv_backend "
              "etcd");
  check_error({"--redirects", "4", "prog"}, 2, "--redirects: '4' is malformed");
  check_error({"--redirects", "0:1,0:2", "prog"}, 2, "malformed");
  check_error({"--tee", "a:1", "prog"}, 2, "--tee: 'a:1' is malformed");
  check_error({"--local_ranks_filter", "0,x", "prog"}, 2, "--local_ranks_filter");
  check_error({"--nproc_per_node", "2", "--local_ranks_filter", "5", "prog"}, 2, "does not exist");
  check_error({"-m", "--no_python", "prog"}, 2, "cannot be used together");
  check_error({"--max_restarts", "-1", "prog"}, 2, "out of range");
  check_error({"--shutdown-timeout", "soon", "prog"}, 2, "not a non-negative number");
  check_error({"--rdzv_backend", "zookeeper", "prog"}, 2, "not one of");
  check_error({"--start_method", "thread", "prog"}, 2, "not one of");
  check_error({"--rdzv_conf", "novalue", "prog"}, 2, "malformed");
  check_error({"--bind-gpu", "prog"}, 2, "no GPU is visible");
  check_error({"--nproc_per_node"}, 2, "");  // CLI11: missing value
}

TEST_CASE(
    "--max-rescales and --node-failure-limit are spellings of their --rdzv_conf keys; the flag "
    "wins") {
  auto r = configure({"--rdzv_backend", "c10d", "--rdzv_endpoint", "h:1", "--nnodes", "2:3",
                      "--rdzv_conf", "max_rescales=7,node_failure_limit=1", "--max-rescales", "3",
                      "--node_failure_limit", "2", "train"});
  REQUIRE(r.ok());
  CHECK(r->config.rdzv_conf.at("max_rescales") == "3");
  CHECK(r->config.rdzv_conf.at("node_failure_limit") == "2");
  auto conf_only = configure({"--rdzv_conf", "max_rescales=7", "train"});
  REQUIRE(conf_only.ok());
  CHECK(conf_only->config.rdzv_conf.at("max_rescales") == "7");
  CHECK_FALSE(conf_only->config.rdzv_conf.count("node_failure_limit"));
  check_error({"--max-rescales", "many", "train"}, 2, "--max-rescales");
  check_error({"--node-failure-limit", "-1", "train"}, 2, "--node-failure-limit");
}

TEST_CASE("--exclude-hosts: a comma-separated list of node names") {
  auto r = configure({"--exclude-hosts", "a,b.example", "train"});
  REQUIRE(r.ok());
  CHECK(r->config.exclude_hosts == std::vector<std::string>{"a", "b.example"});
  check_error({"--exclude_hosts", "a,,b", "train"}, 2, "--exclude-hosts: an empty host name");
}

TEST_CASE("--store-proxy: auto by default, on for multi-node jobs of 1024+ ranks, 2+ per node") {
  const auto proxy = [](std::vector<std::string> args) {
    args.emplace_back("train");
    auto r = configure(args);
    REQUIRE(r.ok());
    return r->config.store_proxy;
  };
  CHECK(proxy({"--nnodes", "128", "--nproc_per_node", "8", "--master_addr", "h"}));
  CHECK(proxy({"--nnodes", "1:512", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
               "--rdzv_endpoint", "h:29400"}));  // the largest world counts
  CHECK_FALSE(proxy({"--nnodes", "127", "--nproc_per_node", "8", "--master_addr", "h"}));
  CHECK_FALSE(proxy({"--nnodes", "2", "--nproc_per_node", "2", "--master_addr", "h"}));
  CHECK_FALSE(proxy({"--nnodes", "2048", "--nproc_per_node", "1", "--master_addr", "h"}));
  CHECK_FALSE(proxy({"--nproc_per_node", "1024"}));  // single node: nothing to save
  CHECK_FALSE(proxy({"--store-proxy", "off", "--nnodes", "128", "--nproc_per_node", "8"}));
  CHECK(proxy({"--store_proxy", "on", "--nproc_per_node", "2"}));
  {
    ScopedEnv env("DDPRUN_STORE_PROXY", "off");
    CHECK_FALSE(proxy({"--nnodes", "128", "--nproc_per_node", "8"}));
  }
  check_error({"--store-proxy", "maybe", "train"}, 2, "--store-proxy must be on, off or auto");
}

TEST_CASE("--store-proxy-max-watched-keys: a whole number >= 1, also from its DDPRUN_ variable") {
  auto dflt = configure({"--store-proxy", "on", "train"});
  REQUIRE(dflt.ok());
  CHECK(dflt->config.store_proxy_max_watched_keys == 262144);  // the proxy's own default
  for (const char* flag : {"--store-proxy-max-watched-keys", "--store_proxy_max_watched_keys"}) {
    auto one = configure({"--store-proxy", "on", flag, "1", "train"});
    REQUIRE_MESSAGE(one.ok(), flag);
    CHECK(one->config.store_proxy_max_watched_keys == 1);
  }
  auto some = configure({"--store-proxy-max-watched-keys=128", "train"});
  REQUIRE(some.ok());
  CHECK(some->config.store_proxy_max_watched_keys == 128);
  {
    ScopedEnv env("DDPRUN_STORE_PROXY_MAX_WATCHED_KEYS", "7");
    auto from_env = configure({"train"});
    REQUIRE(from_env.ok());
    CHECK(from_env->config.store_proxy_max_watched_keys == 7);
    auto flag_wins = configure({"--store-proxy-max-watched-keys", "9", "train"});
    REQUIRE(flag_wins.ok());
    CHECK(flag_wins->config.store_proxy_max_watched_keys == 9);
  }
  check_error({"--store-proxy-max-watched-keys", "-1", "train"}, 2,
              "--store-proxy-max-watched-keys: -1 is out of range");
  check_error({"--store-proxy-max-watched-keys", "0", "train"}, 2,
              "--store-proxy-max-watched-keys: 0 is out of range");
  check_error({"--store-proxy-max-watched-keys", "lots", "train"}, 2,
              "--store-proxy-max-watched-keys: 'lots' is not a whole number");
  check_error({"--store-proxy-max-watched-keys", "1.5", "train"}, 2, "not a whole number");
}

TEST_CASE("did you mean: no search for a word longer than any option (the search is quadratic)") {
  const std::vector<std::string> known{std::string(kMaxSpellingLength + 6, 'a')};
  CHECK_FALSE(closest_spelling(std::string(kMaxSpellingLength + 5, 'a') + "b", known).has_value());
  CHECK(closest_spelling(std::string(kMaxSpellingLength - 1, 'a'),
                         {std::string(kMaxSpellingLength, 'a')})
            .has_value());
}

TEST_CASE("unknown option: the message names the option, never its value (it may be a secret)") {
  const std::string message = unknown_option_message("--rdzv_conff=token=s3cret");
  CHECK(message.find("s3cret") == std::string::npos);
  CHECK(message.find("'--rdzv_conff'") != std::string::npos);
  CHECK(message.find("did you mean --rdzv_conf?") != std::string::npos);
}

TEST_CASE("did you mean: the closest flag or --rdzv_conf key, either spelling") {
  const std::vector<std::string> flags{"--nproc-per-node", "--nproc_per_node", "--standalone",
                                       "--max-restarts", "--max_restarts"};
  CHECK(closest_spelling("--nprco_per_node", flags) == "--nproc_per_node");   // a swap: 1 edit
  CHECK(closest_spelling("--nproc-per-nodes", flags) == "--nproc-per-node");  // the dash family
  CHECK(closest_spelling("--nproc_per-node", flags).has_value());             // mixed: still close
  CHECK(closest_spelling("--stanalone", flags) == "--standalone");
  CHECK(closest_spelling("--MAX-RESTARTS", flags) == "--max-restarts");
  CHECK_FALSE(closest_spelling("--standalone", flags).has_value());  // known: no hint
  CHECK_FALSE(closest_spelling("--zzzzzz", flags).has_value());      // nothing close
  const std::vector<std::string> keys{"join_timeout", "last_call_timeout", "timeout", "token"};
  CHECK(closest_spelling("join_timout", keys) == "join_timeout");
  CHECK(closest_spelling("join-timeout", keys) == "join_timeout");  // dashes for underscores
  CHECK(closest_spelling("tokn", keys) == "token");
  CHECK_FALSE(closest_spelling("colour", keys).has_value());
}

TEST_CASE("an unknown flag names the closest one; an unknown --rdzv_conf key warns with it") {
  check_error({"--nprco_per_node", "2", "prog"}, 2, "did you mean --nproc_per_node?");
  check_error({"--nproc-per-nodes=2", "prog"}, 2,
              "unknown option '--nproc-per-nodes' (did you mean --nproc-per-node? ");
  check_error({"--bogus", "prog"}, 2, "unknown option '--bogus' (options go before");
  auto conf = configure({"--rdzv_conf", "join_timout=5,colour=red", "prog"});
  REQUIRE(conf.ok());
  REQUIRE(conf->notices.size() == 2);  // in key order
  CHECK(conf->notices[0] == "warning: --rdzv_conf: unknown key 'colour' ignored");
  CHECK(conf->notices[1] ==
        "warning: --rdzv_conf: unknown key 'join_timout' ignored (did you mean join_timeout?)");
}
