// SPDX-License-Identifier: MIT
#include "launcher/config/cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <sstream>

#include "launcher/common/exit_codes.hpp"

namespace ddp::launcher {
namespace {

/// One table row per option: both spellings, the PET_ variable and the help text (style R4).
struct StringOptionSpec {
  const char* names;  // CLI11 name list
  const char* env;
  std::string RawOptions::*field;
  const char* help;
};

struct FlagSpec {
  const char* names;
  const char* env;
  bool RawOptions::*field;
  const char* help;
};

constexpr StringOptionSpec kStringOptions[] = {
    // The five node options have no envname: plan_launch_nodes() reads their PET_* variables
    // next to the scheduler's environment, so that its messages can tell the sources apart.
    {"--nnodes", nullptr, &RawOptions::nnodes,
     "Number of nodes, N or MIN:MAX (default: PET_NNODES, the scheduler's, else 1:1)"},
    {"--node-rank,--node_rank", nullptr, &RawOptions::node_rank,
     "Rank of this node, 0..nnodes-1 (default: PET_NODE_RANK, the scheduler's, else 0)"},
    {"--nproc-per-node,--nproc_per_node", "PET_NPROC_PER_NODE", &RawOptions::nproc_per_node,
     "Workers per node: N, gpu, cpu or auto (default 1)"},
    {"--master-addr,--master_addr", nullptr, &RawOptions::master_addr,
     "Address of the rank-0 node (default: PET_MASTER_ADDR, the scheduler's first node, else "
     "127.0.0.1)"},
    {"--master-port,--master_port", nullptr, &RawOptions::master_port,
     "Port on the rank-0 node (default: PET_MASTER_PORT, 15000 + the scheduler's job id, else a "
     "free port on one node, 29500 on several)"},
    {"--rdzv-backend,--rdzv_backend", "PET_RDZV_BACKEND", &RawOptions::rdzv_backend,
     "Rendezvous backend: static (default) or c10d"},
    {"--rdzv-endpoint,--rdzv_endpoint", "PET_RDZV_ENDPOINT", &RawOptions::rdzv_endpoint,
     "Rendezvous endpoint host[:port]"},
    {"--rdzv-id,--rdzv_id", nullptr, &RawOptions::rdzv_id,
     "Job id shared by all nodes (default: PET_RDZV_ID, the scheduler's job id, else none)"},
    {"--rdzv-conf,--rdzv_conf", "PET_RDZV_CONF", &RawOptions::rdzv_conf,
     "Rendezvous settings k1=v1,k2=v2"},
    {"--max-restarts,--max_restarts", "PET_MAX_RESTARTS", &RawOptions::max_restarts,
     "Restarts of the worker group after a failure (default 0)"},
    {"--monitor-interval,--monitor_interval", "PET_MONITOR_INTERVAL", &RawOptions::monitor_interval,
     "Accepted for compatibility; ddprun reacts to exits at once"},
    {"--start-method,--start_method", "PET_START_METHOD", &RawOptions::start_method,
     "Accepted for compatibility (spawn, fork, forkserver); no effect on programs"},
    {"--role", "PET_ROLE", &RawOptions::role, "Worker role name (default: default)"},
    {"--log-dir,--log_dir", "PET_LOG_DIR", &RawOptions::log_dir,
     "Directory for per-attempt, per-rank logs and error files"},
    {"-r,--redirects", "PET_REDIRECTS", &RawOptions::redirects,
     "Send std streams to log files only: 0-3 or a map such as 0:1,1:2"},
    {"-t,--tee", "PET_TEE", &RawOptions::tee,
     "Send std streams to log files and the console: 0-3 or a map such as 0:1,1:2"},
    {"--local-ranks-filter,--local_ranks_filter", "PET_LOCAL_RANKS_FILTER",
     &RawOptions::local_ranks_filter, "Show only these local ranks on the console, e.g. 0,3"},
    {"--local-addr,--local_addr", "PET_LOCAL_ADDR", &RawOptions::local_addr,
     "Address of this node for rendezvous"},
    {"--shutdown-timeout,--shutdown_timeout", "PET_SHUTDOWN_TIMEOUT", &RawOptions::shutdown_timeout,
     "Seconds between SIGTERM and SIGKILL when stopping workers (default 30)"},
    {"--events", "PET_EVENTS", &RawOptions::events,
     "Write one JSON object per line for every launch event to FILE, or - for stdout"},
    {"--python", "PET_PYTHON", &RawOptions::python,
     "Interpreter for .py programs and -m (default $PYTHON_EXEC, else python3)"},
    {"--scheduler", "PET_SCHEDULER", &RawOptions::scheduler,
     "Cluster scheduler whose environment gives the node values: auto (default), none, slurm, "
     "openmpi, pmix, pmi, k8s-indexed, kubeflow (--standalone implies none)"},
};

constexpr FlagSpec kFlags[] = {
    {"--standalone", "PET_STANDALONE", &RawOptions::standalone,
     "Single-node job: free port, fresh run id"},
    {"-m,--module", "PET_MODULE", &RawOptions::module, "Run the program as a Python module (-m)"},
    {"--no-python,--no_python", "PET_NO_PYTHON", &RawOptions::no_python,
     "Execute the program directly, without Python"},
    {"--run-path,--run_path", "PET_RUN_PATH", &RawOptions::run_path,
     "Run the program with Python (torchrun's runpy path)"},
    {"--dry-run,--dry_run", "PET_DRY_RUN", &RawOptions::dry_run,
     "Print each rank's command and environment; start nothing"},
    {"--bind-gpu,--bind_gpu", "PET_BIND_GPU", &RawOptions::bind_gpu,
     "Give each worker CUDA_VISIBLE_DEVICES of its one device (by local rank)"},
    // No PET_ variable: an exported setting would silently stop every launch.
    {"--print-env-detect,--print_env_detect", nullptr, &RawOptions::print_env_detect,
     "Print which scheduler was detected and where every node value comes from; start nothing"},
    {"--store-only,--store_only", nullptr, &RawOptions::store_only,
     "Serve only the job's TCP store at --master_addr (default 127.0.0.1):--master_port (default "
     "29500; 0 = a free port, printed first) until SIGINT/SIGTERM; no program"},
};

}  // namespace

void add_launch_options(CLI::App& app, RawOptions& raw) {
  for (const auto& spec : kStringOptions) {
    // Like argparse (torchrun), a repeated option takes its last value.
    auto* option = app.add_option(spec.names, raw.*(spec.field), spec.help)
                       ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if (spec.env != nullptr) option->envname(spec.env);
  }
  for (const auto& spec : kFlags) {
    auto* flag = app.add_flag(spec.names, raw.*(spec.field), spec.help);
    if (spec.env != nullptr) flag->envname(spec.env);
  }
  // Health (docs/health.md): members of RawOptions::health, so not in the tables above.
  struct HealthOptionSpec {
    const char* names;
    const char* env;
    std::string health::RawHealthOptions::*field;
    const char* help;
  };
  static constexpr HealthOptionSpec kHealthOptions[] = {
      {"--hang-timeout,--hang_timeout", "PET_HANG_TIMEOUT", &health::RawHealthOptions::hang_timeout,
       "Seconds without progress from any rank (heartbeat, else output line, else timer request) "
       "after which the job is hung: stacks saved, stopped, exit 75 (default 0: off)"},
      {"--hang-startup-timeout,--hang_startup_timeout", "PET_HANG_STARTUP_TIMEOUT",
       &health::RawHealthOptions::hang_startup_timeout,
       "The hang timeout until an attempt's first progress, if longer (default 60)"},
      {"--no-progress-restarts,--no_progress_restarts", "PET_NO_PROGRESS_RESTARTS",
       &health::RawHealthOptions::no_progress_restarts,
       "Stop restarting after K restarts in a row that reached no new step (default 2; 0: off)"},
      {"--straggler-ratio,--straggler_ratio", "PET_STRAGGLER_RATIO",
       &health::RawHealthOptions::straggler_ratio,
       "Report a rank whose step rate stays below R x the median for a minute (default 0.5; 0: off)"},
      {"--status-port,--status_port", "PET_STATUS_PORT", &health::RawHealthOptions::status_port,
       "Serve /healthz, /status, /metrics on this port (0: a free one; default "
       "TORCHELASTIC_HEALTH_CHECK_PORT, else none)"},
      {"--status-addr,--status_addr", "PET_STATUS_ADDR", &health::RawHealthOptions::status_addr,
       "Address of the status endpoint (default 127.0.0.1)"},
  };
  for (const auto& spec : kHealthOptions) {
    app.add_option(spec.names, raw.health.*(spec.field), spec.help)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
        ->envname(spec.env);
  }
  app.add_flag("--file-timer,--file_timer", raw.health.file_timer,
               "Serve torchrun's watchdog timers (as TORCHELASTIC_ENABLE_FILE_TIMER=1)")
      ->envname("PET_FILE_TIMER");
  app.set_version_flag("--version", "ddprun " DDPRUN_VERSION);
  // Everything from the program on is passed through: `ddprun train.py --lr 3` never parses --lr.
  app.prefix_command();
  app.footer(
      "PROGRAM [ARGS...]: a .py script (run with PYTHON -u), a module with -m, or any executable.\n"
      "Every option can also come from PET_<NAME> (e.g. PET_NPROC_PER_NODE); the command line "
      "wins.\nInside Slurm, Open MPI, PMIx/PMI or Kubernetes jobs, --nnodes, --node_rank, "
      "--master_addr, --master_port and --rdzv_id default to the scheduler's values "
      "(see --print-env-detect).");
}

Result<ParsedCommandLine> parse_command_line(const std::vector<std::string>& args) {
  ParsedCommandLine parsed;
  CLI::App app{"ddprun: launch and supervise the processes of a distributed PyTorch job",
               "ddprun"};
  add_launch_options(app, parsed.raw);
  // CLI11 parses a reversed vector (it pops from the back).
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    parsed.exit_now = true;
    return parsed;
  } catch (const CLI::CallForVersion&) {
    std::cout << "ddprun " DDPRUN_VERSION "\n";
    parsed.exit_now = true;
    return parsed;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    parsed.exit_now = true;
    return parsed;
  } catch (const CLI::ParseError& e) {
    return Error{exit_codes::kUsage, e.what()};
  }
  parsed.raw.program_and_args = app.remaining();
  // `ddprun [options] -- prog args`: the separator is not part of the program's command line.
  auto& rest = parsed.raw.program_and_args;
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  return parsed;
}

}  // namespace ddp::launcher
