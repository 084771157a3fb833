// SPDX-License-Identifier: MIT
#pragma once
/// LaunchConfig: a validated, fully resolved description of one ddprun job. Produced only by
/// config_from_options() (pure) and consumed by the dry run and the Agent.

#include <signal.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/common/result.hpp"
#include "launcher/common/value_parsers.hpp"
#include "launcher/config/numa_binding.hpp"
#include "launcher/config/raw_options.hpp"
#include "launcher/health/health_settings.hpp"
#include "launcher/output/line_prefix.hpp"
#include "launcher/scheduler/plan.hpp"

namespace ddp::launcher {

/// How the program is started (never through a shell).
enum class ProgramKind {
  PythonScript,   // PYTHON -u script args   (*.py, or --run_path)
  PythonModule,   // PYTHON -u -m module args (-m)
  PythonRunPath,  // PYTHON -u -c <runpy.run_path(script)> script args (--run_path, as torchrun)
  Executable,     // program args            (--no_python, or anything that is not *.py)
};

struct LaunchConfig {
  NodeRange nnodes;
  int node_rank = 0;
  int nproc_per_node = 1;

  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port on this host at launch (single node only)
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string run_id = "none";
  bool run_id_given = false;  // --rdzv_id, PET_RDZV_ID or the scheduler's job id (even "none")
  std::map<std::string, std::string> rdzv_conf;
  bool standalone = false;
  std::string local_addr;
  std::vector<std::string> exclude_hosts;  // --exclude-hosts: joins from these are refused

  int max_restarts = 0;
  double monitor_interval_s = 0.1;  // accepted for compatibility; unused
  std::string start_method = "spawn";
  std::string role = "default";

  ProgramKind program_kind = ProgramKind::Executable;
  std::string program;                    // script, module or executable as given
  std::vector<std::string> program_args;  // untouched
  std::string python;                     // interpreter as given (resolved on PATH later)
  std::vector<std::string> preload;       // --preload: modules of the zygote (docs/warm-start.md)
  std::chrono::milliseconds preload_timeout{300'000};  // --preload-timeout: for its imports

  std::string log_dir;  // empty: a temporary directory
  StreamSpec redirects;
  StreamSpec tee;
  std::optional<std::set<int>> console_ranks;  // --local_ranks_filter; nullopt = all

  LinePrefixStyle line_prefix;  // --no-prefix, --log-line-prefix-template
  ColorMode color = ColorMode::Auto;
  std::vector<std::string> duplicate_stdout_filters;  // torchrun's filtered_stdout.log
  std::vector<std::string> duplicate_stderr_filters;

  std::chrono::milliseconds shutdown_timeout{30'000};
  /// Signals that stop the job (--signals-to-handle); SIGUSR1/SIGUSR2 not listed here are only
  /// forwarded to the workers.
  std::vector<int> stop_signals{SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  std::string events;               // "", "-", "fd:N" or a path
  bool virtual_local_rank = false;  // LOCAL_RANK=0, CUDA_VISIBLE_DEVICES = the worker's device
  std::string numa_binding;         // "", node, socket, exclusive, core-complex
  std::vector<NumaPlacement> numa_placements;  // one per local rank when numa_binding is set
  bool dry_run = false;
  bool bind_gpu = false;
  health::HealthSettings health;  // hangs, watchdog timers, status endpoint (docs/health.md)
  std::vector<std::string> gpus;  // the devices this node sees (for --bind-gpu)

  /// TORCHELASTIC_USE_AGENT_STORE. False while worker rank 0 hosts PyTorch's own TCPStore; it
  /// flips to true once ddprun hosts the store itself (rendezvous/).
  bool use_agent_store = false;

  /// --store-proxy, resolved (auto = multi-node): the workers reach the job's store through a
  /// proxy on their own node (rendezvous/proxy), only while the agents host the store.
  bool store_proxy = false;
  /// --store-proxy-max-watched-keys: keys watched at once on the proxy's link to the root
  /// (StoreProxyOptions::max_watched_keys, rendezvous/proxy/store_proxy.hpp).
  std::size_t store_proxy_max_watched_keys = 262144;

  /// True when OMP_NUM_THREADS must be set to 1 for the workers (unset and nproc > 1).
  bool default_omp_threads = false;

  int world_size() const { return nnodes.max * nproc_per_node; }
  /// True when stdout carries only JSON events (--events - or fd:1): worker stdout goes to stderr.
  bool events_on_stdout() const { return events == "-" || events == "fd:1"; }
  bool multi_node() const { return nnodes.max > 1; }
};

/// Facts about the host that the configuration depends on, gathered by the caller (so that
/// config_from_options stays pure and testable).
struct HostFacts {
  std::optional<std::string> cuda_visible_devices;
  int driver_gpu_count = 0;
  int cpu_count = 1;
  std::optional<std::string> python_exec;  // $PYTHON_EXEC
  /// The interpreter of the virtual environment ddprun is installed in, if any (the default
  /// after --python and PYTHON_EXEC, as torchrun's is its own sys.executable).
  std::optional<std::string> installed_python;
  bool omp_num_threads_set = false;
  std::string fresh_run_id = "none";  // used by --standalone
  /// The environment ddprun was started in: PET_NNODES & co. and the scheduler's variables.
  std::map<std::string, std::string> environment;
};

/// The validated configuration plus notices to print (one line each, without "ddprun: ").
struct ConfiguredLaunch {
  LaunchConfig config;
  std::vector<std::string> notices;
  /// Where the node values came from (flags > PET_* > scheduler), for --print-env-detect.
  scheduler::SchedulerPlan node_plan;
  /// True when config.master_addr is a host name from the scheduler that must be resolved to an
  /// address before launch (resolve_launch_master; Slurm node names need not be DNS names).
  bool master_needs_resolving = false;
};

/// Validates every value and resolves nproc, ports, program kind and streams. Pure: no files,
/// no environment, no processes. Errors carry exit code 2.
Result<ConfiguredLaunch> config_from_options(const RawOptions& raw, const HostFacts& host);

}  // namespace ddp::launcher
