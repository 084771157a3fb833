// SPDX-License-Identifier: MIT
// Issue 11's pure pieces: the line prefix (template, color), argparse-style abbreviations, the
// torchrun flags' values, and the NUMA placement against fake sysfs topologies.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "launcher/config/cli.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/config/numa_binding.hpp"
#include "launcher/env/worker_env.hpp"
#include "launcher/output/line_prefix.hpp"

using namespace ddp::launcher;

namespace {

HostFacts cpu_host() {
  HostFacts h;
  h.cpu_count = 4;
  return h;
}

Result<ConfiguredLaunch> configure_pipes(std::vector<std::string> args,
                                         HostFacts host = cpu_host()) {
  auto parsed = parse_command_line(args);
  if (!parsed) return parsed.error();
  return config_from_options(parsed->raw, host);
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

}  // namespace

TEST_CASE("prefix templates substitute like Python's Template.safe_substitute") {
  PrefixFields f{"trainer", 5, 1, "node7"};
  CHECK(substitute_template("[${role_name}${local_rank}]:", f) == "[trainer1]:");
  CHECK(substitute_template("${hostname}:${rank}: ", f) == "node7:5: ");
  CHECK(substitute_template("$rank/$local_rank$$", f) == "5/1$");
  CHECK(substitute_template("${unknown} $nope ${rank", f) == "${unknown} $nope ${rank");
  CHECK(substitute_template("$", f) == "$");
  CHECK(substitute_template("${rank}x$ranky", f) == "5x$ranky");  // $ranky is another name
}

TEST_CASE("console prefix: none, template, or ddprun's colored [rankN]:") {
  PrefixFields f{"default", 2, 0, "h"};
  CHECK(console_line_prefix({}, f, false) == "[rank2]:");
  CHECK(console_line_prefix({}, f, true) == "\x1b[35m[rank2]:\x1b[0m");
  CHECK(console_line_prefix({true, std::nullopt}, f, true) == "");
  CHECK(console_line_prefix({false, std::string("<${rank}> ")}, f, true) == "<2> ");
}

TEST_CASE("color: NO_COLOR (non-empty) turns auto off; always and never are absolute") {
  CHECK(use_color(ColorMode::Auto, true, std::nullopt));
  CHECK_FALSE(use_color(ColorMode::Auto, false, std::nullopt));
  CHECK_FALSE(use_color(ColorMode::Auto, true, std::string("1")));
  CHECK(use_color(ColorMode::Auto, true, std::string("")));
  CHECK(use_color(ColorMode::Always, false, std::string("1")));
  CHECK_FALSE(use_color(ColorMode::Never, true, std::nullopt));
  CHECK_FALSE(parse_color_mode("sometimes").ok());
}

TEST_CASE("abbreviations: unambiguous prefixes expand, ambiguous ones name the candidates") {
  auto a =
      expand_abbreviations({"--nproc_per", "2", "--standalon", "--redirect=3", "prog", "--nproc"});
  REQUIRE(a.ok());
  CHECK(*a == std::vector<std::string>{"--nproc_per_node", "2", "--standalone", "--redirects=3",
                                       "prog", "--nproc"});
  // The value of an option is never taken for an option, and -r takes one too.
  auto v = expand_abbreviations({"--role", "--stand", "-r", "3", "--max-rest", "1", "x"});
  REQUIRE(v.ok());
  CHECK(*v == std::vector<std::string>{"--role", "--stand", "-r", "3", "--max-restarts", "1", "x"});
  auto amb = expand_abbreviations({"--no", "prog"});
  REQUIRE_FALSE(amb.ok());
  CHECK(amb.error().exit_code == 2);
  CHECK(amb.error().message ==
        "ambiguous option: --no could match --no-python, --no_python, --node-rank, --node_rank, "
        "--no-prefix, --no_prefix, --node-failure-limit, --node_failure_limit, "
        "--no-progress-restarts, "
        "--no_progress_restarts");
  // The health flags are in the table too (docs/health.md).
  auto h = expand_abbreviations({"--hang-t", "5", "--status_p=0", "--file-t", "prog"});
  REQUIRE(h.ok());
  CHECK(*h ==
        std::vector<std::string>{"--hang-timeout", "5", "--status_port=0", "--file-timer", "prog"});
  auto after_separator = expand_abbreviations({"--", "--no"});
  CHECK(after_separator.ok());
}

TEST_CASE("every torchrun 2.15 flag is in the table") {
  std::set<std::string> names;
  for (const auto& option : launch_option_table())
    names.insert(option.long_names.begin(), option.long_names.end());
  for (const char* flag : {"--log-line-prefix-template", "--virtual-local-rank",
                           "--signals-to-handle", "--numa-binding", "--duplicate-stdout-filters",
                           "--duplicate-stderr-filters", "--event-log-handler", "--logs-specs",
                           "--print-completion", "--log_line_prefix_template", "--logs_specs"}) {
    CHECK_MESSAGE(names.count(flag), flag);
  }
}

TEST_CASE("PET_ variables only for torchrun's flags") {
  ::setenv("PET_DRY_RUN", "1", 1);
  ::setenv("PET_VIRTUAL_LOCAL_RANK", "1", 1);
  ::setenv("PET_HANG_TIMEOUT", "5", 1);
  auto r = configure_pipes({"prog"});
  ::unsetenv("PET_HANG_TIMEOUT");
  ::unsetenv("PET_DRY_RUN");
  ::unsetenv("PET_VIRTUAL_LOCAL_RANK");
  REQUIRE(r.ok());
  CHECK_FALSE(r->config.dry_run);
  CHECK(r->config.health.hang_timeout.count() == 0);
  CHECK(r->config.virtual_local_rank);
}

TEST_CASE("torchrun flag values: filters, signals, plugins, rdzv_conf, events") {
  auto f = configure_pipes(
      {"--duplicate-stdout-filters", "a,,b,c", "--duplicate_stderr_filters", "", "prog"});
  REQUIRE(f.ok());
  CHECK(f->config.duplicate_stdout_filters == std::vector<std::string>{"a,b", "c"});
  CHECK(f->config.duplicate_stderr_filters.empty());
  auto s = configure_pipes({"--signals-to-handle", "SIGTERM, USR1,SIGTERM", "prog"});
  REQUIRE(s.ok());
  CHECK(s->config.stop_signals == std::vector<int>{SIGTERM, SIGUSR1});
  CHECK_FALSE(configure_pipes({"--signals-to-handle", "SIGCHLD", "prog"}).ok());
  CHECK(configure_pipes({"--logs-specs", "default", "--event-log-handler", "null", "prog"}).ok());
  auto console = configure_pipes({"--event-log-handler", "console", "prog"});
  REQUIRE(console.ok());
  CHECK(console->config.events == "fd:2");
  auto bad = configure_pipes({"--logs_specs", "mine", "prog"});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("--logs-specs: 'mine'") == 0);
  auto conf =
      configure_pipes({"--rdzv_conf", "'join_timeout=5,colour=blue,timeout=\"7\"'", "prog"});
  REQUIRE(conf.ok());
  CHECK(conf->config.rdzv_conf ==
        std::map<std::string, std::string>{{"join_timeout", "5"}, {"timeout", "7"}});
  REQUIRE(conf->notices.size() == 1);
  CHECK(conf->notices[0] == "warning: --rdzv_conf: unknown key 'colour' ignored");
  auto ev = configure_pipes({"--events", "fd:1", "prog"});
  REQUIRE(ev.ok());
  CHECK(ev->config.events_on_stdout());
  CHECK_FALSE(configure_pipes({"--events", "fd:", "prog"}).ok());
  HostFacts h = cpu_host();
  h.environment["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "${rank}>";
  auto t = configure_pipes({"prog"}, h);
  REQUIRE(t.ok());
  CHECK(t->config.line_prefix.tmpl == std::optional<std::string>("${rank}>"));
  auto flag_wins = configure_pipes({"--log-line-prefix-template", "X", "prog"}, h);
  CHECK(flag_wins->config.line_prefix.tmpl == std::optional<std::string>("X"));
}

TEST_CASE("--shutdown-timeout defaults to TORCH_ELASTIC_SHUTDOWN_TIMEOUT, as in torchrun") {
  HostFacts h = cpu_host();
  CHECK(configure_pipes({"prog"}, h)->config.shutdown_timeout.count() == 30'000);
  h.environment["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "4";
  CHECK(configure_pipes({"prog"}, h)->config.shutdown_timeout.count() == 4'000);
  CHECK(configure_pipes({"--shutdown-timeout", "2", "prog"}, h)->config.shutdown_timeout.count() ==
        2'000);
  h.environment["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "soon";
  auto bad = configure_pipes({"prog"}, h);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT") == 0);
}

TEST_CASE("--virtual-local-rank: LOCAL_RANK 0 and the worker's own device") {
  HostFacts h = cpu_host();
  h.cuda_visible_devices = "4,6";
  auto r = configure_pipes({"--nproc_per_node", "2", "--virtual-local-rank", "prog"}, h);
  REQUIRE(r.ok());
  EnvMap parent{{"CUDA_VISIBLE_DEVICES", "4,6"}};
  auto env1 = worker_env_additions(r->config, WorkerSlot{1, 0, 1, "e"}, parent);
  CHECK(env1["LOCAL_RANK"] == "0");
  CHECK(env1["RANK"] == "1");
  CHECK(env1["CUDA_VISIBLE_DEVICES"] == "6");
  auto no_parent = configure_pipes({"--nproc_per_node", "2", "--virtual-local-rank", "prog"});
  REQUIRE(no_parent.ok());
  CHECK(worker_env_additions(no_parent->config, WorkerSlot{1, 0, 1, "e"},
                             {})["CUDA_VISIBLE_DEVICES"] == "1");
  CHECK_FALSE(configure_pipes({"--nproc_per_node", "3", "--virtual-local-rank", "prog"}, h).ok());
}

TEST_CASE("--run_path runs the script through runpy, as torchrun") {
  auto r = configure_pipes({"--run_path", "/abs/train.py", "--lr", "3"});
  REQUIRE(r.ok());
  CHECK(r->config.program_kind == ProgramKind::PythonRunPath);
}

TEST_CASE(
    "NUMA placement from a fake sysfs: GPUs' nodes, spread, exclusive, socket, core complex") {
  namespace fs = std::filesystem;
  fs::path root = fs::temp_directory_path() / fmt::format("ddprun_numa_{}", ::getpid());
  fs::remove_all(root);
  write_file(root / "sys/devices/system/cpu/online", "0-7");
  write_file(root / "sys/devices/system/node/node0/cpulist", "0-3");
  write_file(root / "sys/devices/system/node/node1/cpulist", "4-7");
  write_file(root / "sys/devices/system/node/node2/cpulist", "");  // memory only
  for (int cpu = 0; cpu < 8; ++cpu) {
    fs::path dir = root / fmt::format("sys/devices/system/cpu/cpu{}", cpu);
    write_file(dir / "topology/physical_package_id", cpu < 4 ? "0" : "1");
    write_file(dir / "cache/index3/shared_cpu_list", cpu < 2 ? "0-1" : cpu < 4 ? "2-3" : "4-7");
  }
  // Two GPUs; PCI order: 0000:1a (node 1), then 0000:3b (node 0).
  write_file(root / "proc/driver/nvidia/gpus/0000:3b:00.0/information", "x");
  write_file(root / "proc/driver/nvidia/gpus/0000:1a:00.0/information", "x");
  write_file(root / "sys/bus/pci/devices/0000:1a:00.0/numa_node", "1");
  write_file(root / "sys/bus/pci/devices/0000:3b:00.0/numa_node", "0");
  NumaTopology topo = read_numa_topology(root);
  fs::remove_all(root);
  CHECK(topo.gpu_nodes == std::vector<int>{1, 0});
  CHECK(topo.node_cpus.at(2).empty());

  auto node = plan_numa_binding("node", topo, {"0", "1"}, 2);
  REQUIRE(node.ok());
  CHECK((*node)[0].node == 1);
  CHECK(format_cpu_list((*node)[0].cpus) == "4-7");
  CHECK((*node)[0].reason == "GPU 0");
  CHECK(format_cpu_list((*node)[1].cpus) == "0-3");

  auto spread = plan_numa_binding("node", topo, {}, 3);  // no GPU: round robin over nodes with CPUs
  REQUIRE(spread.ok());
  CHECK((*spread)[0].node == 0);
  CHECK((*spread)[1].node == 1);
  CHECK((*spread)[2].node == 0);
  CHECK((*spread)[2].reason == "spread");

  auto exclusive = plan_numa_binding("exclusive", topo, {"1", "1", "0"}, 3);
  REQUIRE(exclusive.ok());
  CHECK(format_cpu_list((*exclusive)[0].cpus) == "0-1");
  CHECK(format_cpu_list((*exclusive)[1].cpus) == "2-3");
  CHECK(format_cpu_list((*exclusive)[2].cpus) == "4-7");
  CHECK_FALSE(plan_numa_binding("exclusive", topo, {}, 9).ok());

  auto socket = plan_numa_binding("socket", topo, {"1"}, 1);
  REQUIRE(socket.ok());
  CHECK(format_cpu_list((*socket)[0].cpus) == "0-3");

  auto complexes = plan_numa_binding("core-complex", topo, {"1", "1", "1"}, 3);
  REQUIRE(complexes.ok());
  CHECK(format_cpu_list((*complexes)[0].cpus) == "0-1");
  CHECK(format_cpu_list((*complexes)[1].cpus) == "2-3");
  CHECK(format_cpu_list((*complexes)[2].cpus) == "0-1");

  CHECK_FALSE(plan_numa_binding("node", NumaTopology{}, {}, 1).ok());
  CHECK(parse_cpu_list("0-2,5,7-8") == std::vector<int>{0, 1, 2, 5, 7, 8});
}

TEST_CASE("completions are generated from the table") {
  auto bash = completion_script("bash");
  REQUIRE(bash.ok());
  CHECK(bash->find("--nproc_per_node") != std::string::npos);
  CHECK(bash->find("complete -o filenames -F _ddprun ddprun") != std::string::npos);
  auto zsh = completion_script("zsh");
  REQUIRE(zsh.ok());
  CHECK(zsh->rfind("#compdef ddprun", 0) == 0);
  CHECK_FALSE(completion_script("tcsh").ok());
}
