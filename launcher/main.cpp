// SPDX-License-Identifier: MIT
// ddprun: parse, validate, then hand a resolved setup to the Agent. main() only wires (style R14).

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/exit_codes.hpp"
#include "common/host_name.hpp"
#include "launcher/config/cli.hpp"
#include "launcher/config/cuda_devices.hpp"
#include "launcher/config/node_plan.hpp"
#include "launcher/config/program.hpp"
#include "launcher/config/secret_scrub.hpp"
#include "launcher/multinode/multinode_settings.hpp"
#include "launcher/multinode/store_only.hpp"
#include "launcher/output/output_sink.hpp"
#include "launcher/process/spawn.hpp"
#include "launcher/run/agent.hpp"
#include "launcher/run/dry_run.hpp"
#include "launcher/scheduler/detection.hpp"
#include "launcher/scheduler/report.hpp"
#include "launcher/view/commands.hpp"
#include "rendezvous/store_runner.hpp"

namespace {

using namespace ddp::launcher;
namespace exit_codes = ddp::exit_codes;

int fail(const Error& error) {
  write_fully(STDERR_FILENO, fmt::format("ddprun: {}\n", error.message));
  return error.exit_code;
}

std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

std::string fresh_run_id() {
  std::random_device rd;
  return fmt::format("{:08x}-{:04x}-{:04x}", rd(), rd() & 0xffff, rd() & 0xffff);
}

/// --print-env-detect: the report only (no program needed, nothing started). When resolution
/// fails, what was found is still printed before the error, so the report explains it.
int print_env_detect(const RawOptions& raw) {
  const auto env = current_environment();
  auto plan = plan_launch_nodes(raw, env);
  if (!plan) {
    try {
      auto detection = scheduler::detect_scheduler(env, scheduler_choice(raw));
      write_fully(STDOUT_FILENO, scheduler::render_detection_report(detection, {}));
    } catch (const scheduler::SchedulerError& e) {
      write_fully(STDOUT_FILENO, scheduler::render_found_variables(env) +
                                     fmt::format("scheduler detection failed: {}\n", e.what()));
    }
    return fail(plan.error());
  }
  auto resolved = resolve_launch_master(*plan);
  write_fully(STDOUT_FILENO,
              scheduler::render_detection_report(plan->detection, plan->settings, plan->master));
  if (!resolved) return fail(resolved.error());
  return exit_codes::kSuccess;
}

/// `ddprun top`, `ddprun report` and `ddprun help`, which look at a job instead of running one
/// (docs/health.md); nothing when argv names none of them.
std::optional<int> run_subcommand(int argc, char** argv) {
  if (argc <= 1) return std::nullopt;
  const std::string_view first = argv[1];
  const std::vector<std::string> rest(argv + 2, argv + argc);
  if (first == "top") return view::run_top(rest);
  if (first == "report") return view::run_report(rest);
  // `ddprun help [top|report]`: what `--help` prints (git's and pip's habit).
  if (first != "help") return std::nullopt;
  if (!rest.empty() && rest.front() == "top") return view::run_top({"--help"});
  if (!rest.empty() && rest.front() == "report") return view::run_report({"--help"});
  if (!rest.empty()) {
    return fail(Error{exit_codes::kUsage,
                      fmt::format("help: no command '{}' (try: ddprun help, ddprun help top, "
                                  "ddprun help report)",
                                  rest.front())});
  }
  auto help = parse_command_line({"--help"});
  return help ? help->exit_code : fail(help.error());
}

/// What config_from_options needs to know about this machine and environment.
HostFacts host_facts(const RawOptions& raw) {
  HostFacts host;
  host.cuda_visible_devices = env_value("CUDA_VISIBLE_DEVICES");
  // Listing /dev costs milliseconds; only gpu/auto, --bind-gpu, --virtual-local-rank and
  // --numa-binding need the driver's count.
  const auto& nproc = raw.nproc_per_node;
  if (!host.cuda_visible_devices && (nproc == "gpu" || nproc == "auto" || raw.bind_gpu ||
                                     raw.virtual_local_rank || !raw.numa_binding.empty())) {
    host.driver_gpu_count = count_driver_gpus();
  }
  host.cpu_count = static_cast<int>(std::thread::hardware_concurrency());
  host.python_exec = env_value("PYTHON_EXEC");
  char self[4096];
  if (ssize_t n = ::readlink("/proc/self/exe", self, sizeof self); n > 0) {
    host.installed_python = venv_python_beside(std::string(self, static_cast<size_t>(n)));
  }
  host.omp_num_threads_set = env_value("OMP_NUM_THREADS").has_value();
  host.fresh_run_id = fresh_run_id();
  host.environment = current_environment();
  return host;
}

/// Validates the flags against this machine, then runs the job (or prints the dry run).
int run_job(const RawOptions& raw) {
  auto configured = config_from_options(raw, host_facts(raw));
  if (!configured) return fail(configured.error());
  LaunchConfig& config = configured->config;
  if (configured->master_needs_resolving) {  // a scheduler's node name: DNS, else Slurm NodeAddr
    auto resolved = resolve_launch_master(configured->node_plan);
    if (!resolved) return fail(resolved.error());
    config.master_addr = configured->node_plan.master->address;
  }

  if (!config.numa_binding.empty()) {  // placement from the machine's sysfs topology
    auto placements = plan_numa_binding(config.numa_binding, read_numa_topology(), config.gpus,
                                        config.nproc_per_node);
    if (!placements) return fail(placements.error());
    config.numa_placements = std::move(*placements);
  }

  // ddprun hosts the job's store (or joins the one node 0 / the c10d endpoint hosts).
  config.use_agent_store = true;
  if (auto endpoint = apply_rdzv_endpoint(config); !endpoint) return fail(endpoint.error());
  std::optional<MultiNodeSettings> multinode;
  if (needs_rendezvous(config)) {
    // The node's name in the rendezvous (messages, --exclude-hosts): --local_addr when given.
    auto settings =
        multinode_settings(config, env_value("DDPRUN_RDZV_TOKEN"),
                           config.local_addr.empty() ? ddp::host_name() : config.local_addr);
    if (!settings) return fail(settings.error());
    multinode = *settings;
  }

  auto executable = resolve_worker_executable(config, env_value("PATH").value_or("/usr/bin:/bin"));
  // A dry run starts nothing, so it shows the command even when the program is not here.
  if (!executable && !config.dry_run) return fail(executable.error());
  std::vector<std::string> worker_args = worker_argv(config);

  const int master_port = config.master_port;  // 0: the store's kernel-chosen port, held

  // ddprun's own notices go to stderr only: stdout belongs to the workers (or to --events -).
  for (const auto& notice : configured->notices) {
    write_fully(STDERR_FILENO, fmt::format("ddprun: {}\n", notice));
  }
  EnvMap parent_env = current_environment();
  if (config.dry_run) {
    std::string text =
        format_dry_run(config, worker_args, parent_env, master_port, config.events_on_stdout());
    write_fully(STDOUT_FILENO, text);
    return exit_codes::kSuccess;
  }

  Agent agent(AgentSetup{config, executable.value(), worker_args, std::move(parent_env),
                         ddp::host_name(), master_port, plan_store(config), multinode});
  return agent.run();
}

int run_main(int argc, char** argv) {
  // A closed stdout (ddprun ... | head) must not kill the supervisor; writes report EPIPE instead.
  ::signal(SIGPIPE, SIG_IGN);
  // The hosted store, the status port and the workers' pipes need descriptors; the workers keep
  // the limit they would have had.
  if (auto before = ddp::rdzv::raise_fd_limit()) set_worker_fd_soft_limit(*before);
  if (auto code = run_subcommand(argc, argv)) return *code;

  auto parsed = parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed) return fail(parsed.error());
  scrub_secrets_from_proc(argc, argv, argc - 1 - parsed->raw.program_and_args.size());
  if (parsed->exit_now) return parsed->exit_code;
  if (parsed->raw.store_only) {
    if (!parsed->raw.program_and_args.empty()) {
      const std::string& first = parsed->raw.program_and_args.front();
      if (first.size() > 1 && first[0] == '-') {  // e.g. the retired --follow
        return fail(Error{exit_codes::kUsage, "--store-only: " + unknown_option_message(first)});
      }
      return fail(Error{exit_codes::kUsage, "--store-only takes no program"});
    }
    return run_store_only(parsed->raw);
  }
  if (parsed->raw.print_env_detect) return print_env_detect(parsed->raw);

  return run_job(parsed->raw);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    // Only programmer errors and resource exhaustion get here (style R7).
    write_fully(STDERR_FILENO, fmt::format("ddprun: internal error: {}\n", e.what()));
    return exit_codes::kInternal;
  }
}
