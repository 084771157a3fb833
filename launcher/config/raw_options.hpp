// SPDX-License-Identifier: MIT
#pragma once
/// RawOptions: the command line exactly as typed (or taken from PET_* variables), before any
/// validation. Numbers stay strings here so that config_from_options() can reject bad values
/// with ddprun's own one-line messages and exit code 2.

#include <string>
#include <vector>

#include "launcher/health/health_options.hpp"

namespace ddp::launcher {

struct RawOptions {
  // torchrun's flags, with torchrun's (2.x) defaults. The five node options (nnodes, node_rank,
  // master_addr, master_port, rdzv_id) are empty when not typed: their PET_* variables and the
  // scheduler's environment are read by plan_launch_nodes(), which can then name each source.
  std::string nnodes;     // empty: PET_NNODES, the scheduler, else 1:1
  std::string node_rank;  // empty: PET_NODE_RANK, the scheduler, else 0
  std::string nproc_per_node = "1";
  std::string master_addr;  // empty: PET_MASTER_ADDR, the scheduler, else 127.0.0.1
  std::string master_port;  // empty: PET_, the scheduler; else a free port (1 node), 29500
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id;  // empty: PET_RDZV_ID, the scheduler's job id, else "none"
  std::string rdzv_conf;
  bool standalone = false;
  std::string max_restarts = "0";
  std::string max_rescales;        // empty: --rdzv_conf max_rescales, else 100
  std::string node_failure_limit;  // empty: --rdzv_conf node_failure_limit, else 0 (off)
  std::string exclude_hosts;       // --exclude-hosts h1,h2
  std::string monitor_interval = "0.1";
  std::string start_method = "spawn";
  std::string event_log_handler = "null";  // torchrun's Python plugin name; only null/default
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string
      log_line_prefix_template;  // empty: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else default
  std::string local_ranks_filter;
  std::string duplicate_stdout_filters;  // torchrun's comma list (",," escapes a comma)
  std::string duplicate_stderr_filters;
  std::string local_addr;
  std::string logs_specs;    // torchrun's Python plugin name; only default
  std::string numa_binding;  // "", node, socket, exclusive or core-complex
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  std::string shutdown_timeout;  // empty: TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 (as torchrun)
  bool virtual_local_rank = false;
  std::string print_completion;  // bash or zsh: print the script and exit

  // ddprun's own flags (no PET_* variables: those belong to torchrun's flags).
  std::string events;  // "" off, "-" stdout, "fd:N" an inherited descriptor, else a file
  bool no_prefix = false;
  std::string color = "auto";  // auto, always or never
  bool dry_run = false;
  bool bind_gpu = false;
  std::string python;           // empty: $PYTHON_EXEC, else python3 on PATH
  std::string preload;          // --preload: a comma list of modules; empty: workers are exec'd
  bool preload_given = false;   // --preload was on the command line (an empty list is an error)
  std::string preload_timeout;  // --preload-timeout: seconds; empty: 300
  std::string store_proxy = "auto";  // on, off or auto (multi-node, 2+ per node, 1024+ ranks)
  std::string store_proxy_max_watched_keys;  // empty: the proxy's default (262144)
  std::string scheduler = "auto";            // auto, none or one detector (slurm, openmpi, ...)
  bool print_env_detect = false;             // print the scheduler detection report and exit
  bool store_only = false;                   // serve only the store at master_addr:master_port
  health::RawHealthOptions health;           // --hang-timeout, --status-port, ... (docs/health.md)

  /// The program and everything after it, untouched.
  std::vector<std::string> program_and_args;
};

}  // namespace ddp::launcher
