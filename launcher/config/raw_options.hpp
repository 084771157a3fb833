// SPDX-License-Identifier: MIT
#pragma once
/// RawOptions: the command line exactly as typed (or taken from PET_* variables), before any
/// validation. Numbers stay strings here so that config_from_options() can reject bad values
/// with ddprun's own one-line messages and exit code 2.

#include <string>
#include <vector>

namespace ddp::launcher {

struct RawOptions {
  // torchrun's flags, with torchrun's (2.x) defaults.
  std::string nnodes = "1:1";
  std::string node_rank = "0";
  std::string nproc_per_node = "1";
  std::string master_addr;  // empty: 127.0.0.1
  std::string master_port;  // empty: a free port on one node, 29500 on several
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  std::string rdzv_conf;
  bool standalone = false;
  std::string max_restarts = "0";
  std::string monitor_interval = "0.1";
  std::string start_method = "spawn";
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;
  std::string local_addr;

  // ddprun's own flags.
  std::string shutdown_timeout = "30";
  std::string events;  // "" off, "-" stdout, else a file
  bool dry_run = false;
  bool bind_gpu = false;
  std::string python;  // empty: $PYTHON_EXEC, else python3 on PATH

  /// The program and everything after it, untouched.
  std::vector<std::string> program_and_args;
};

}  // namespace ddp::launcher
