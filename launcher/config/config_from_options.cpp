// SPDX-License-Identifier: MIT
#include "launcher/config/launch_config.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>

#include <tuple>
#include "launcher/common/usage_error.hpp"
#include "launcher/config/cli.hpp"
#include "launcher/config/cuda_devices.hpp"
#include "launcher/config/did_you_mean.hpp"
#include "launcher/config/node_plan.hpp"
#include "launcher/config/rdzv_conf.hpp"

namespace ddp::launcher {
namespace {

/// A value typed as a flag or exported as PET_*, as opposed to one from the scheduler.
bool is_explicit(const std::string& origin) {
  return origin.rfind("--", 0) == 0 || origin.rfind("PET_", 0) == 0;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// --nproc_per_node: N, gpu, cpu or auto. Returns the count and appends notices.
Result<int> resolve_nproc(const std::string& text, const std::vector<std::string>& gpus,
                          const HostFacts& host) {
  if (text == "gpu") {
    if (gpus.empty()) {
      return usage_error(host.cuda_visible_devices
                             ? fmt::format("--nproc_per_node=gpu: no GPU is visible "
                                           "(CUDA_VISIBLE_DEVICES='{}')",
                                           *host.cuda_visible_devices)
                             : std::string("--nproc_per_node=gpu: no GPU found (no NVIDIA driver "
                                           "devices and CUDA_VISIBLE_DEVICES is unset)"));
    }
    return static_cast<int>(gpus.size());
  }
  if (text == "cpu") return std::max(1, host.cpu_count);
  if (text == "auto")
    return gpus.empty() ? std::max(1, host.cpu_count) : static_cast<int>(gpus.size());
  auto n = parse_integer("--nproc_per_node", text, -1'000'000'000, 1'000'000'000);
  if (!n) {
    return usage_error(
        fmt::format("--nproc_per_node: '{}' is not a number, gpu, cpu or auto", text));
  }
  if (*n < 1) return usage_error(fmt::format("--nproc_per_node: {} must be at least 1", *n));
  if (*n > 8192) return usage_error(fmt::format("--nproc_per_node: {} is more than 8192", *n));
  return static_cast<int>(*n);
}

/// torchrun's comma_separated_list: "a,b" → {a, b}; ",," is a literal comma; "" → {}.
std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> items;
  if (text.empty()) return items;
  std::string item;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ',' && i + 1 < text.size() && text[i + 1] == ',') {
      item += ',';
      ++i;
    } else if (text[i] == ',') {
      items.push_back(std::move(item));
      item.clear();
    } else {
      item += text[i];
    }
  }
  items.push_back(std::move(item));
  return items;
}

/// --signals-to-handle "SIGTERM,SIGUSR1": signal numbers. Signals that cannot be caught, or that
/// ddprun needs for itself (SIGCHLD, SIGPIPE), are refused.
Result<std::vector<int>> parse_signal_list(const std::string& text) {
  static const std::map<std::string, int> kSignals{
      {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},    {"SIGQUIT", SIGQUIT},
      {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGALRM", SIGALRM},  {"SIGXCPU", SIGXCPU},
      {"SIGCONT", SIGCONT}, {"SIGTSTP", SIGTSTP}, {"SIGWINCH", SIGWINCH}};
  std::vector<int> out;
  for (auto name : comma_list(text)) {
    while (!name.empty() && name.front() == ' ') name.erase(name.begin());
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (name.empty()) continue;
    std::string full = name.rfind("SIG", 0) == 0 ? name : "SIG" + name;
    auto it = kSignals.find(full);
    if (it == kSignals.end()) {
      return usage_error(
          fmt::format("--signals-to-handle: '{}' is not a signal ddprun can handle "
                      "(SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, "
                      "SIGXCPU, SIGCONT, SIGTSTP, SIGWINCH)",
                      name));
    }
    if (std::find(out.begin(), out.end(), it->second) == out.end()) out.push_back(it->second);
  }
  return out;
}

/// Strips one pair of surrounding quotes that a shell did not remove (PyTorch's own launcher
/// test passes --rdzv-conf='join_timeout=5,...' through a list, quotes included).
std::string unquoted(std::string text) {
  if (text.size() >= 2 && (text.front() == '\'' || text.front() == '"') &&
      text.back() == text.front()) {
    return text.substr(1, text.size() - 2);
  }
  return text;
}

Result<ProgramKind> resolve_program_kind(const RawOptions& raw) {
  if (raw.module && raw.no_python) {
    return usage_error("-m/--module and --no_python cannot be used together");
  }
  if (raw.module && raw.run_path) {
    return usage_error("-m/--module and --run_path cannot be used together");
  }
  const std::string& program = raw.program_and_args.front();
  if (raw.module) return ProgramKind::PythonModule;
  if (raw.run_path)
    return ProgramKind::PythonRunPath;  // torchrun: --run_path wins over --no_python
  if (raw.no_python) return ProgramKind::Executable;
  return ends_with(program, ".py") ? ProgramKind::PythonScript : ProgramKind::Executable;
}

/// The program and how to start it: kind, arguments, interpreter, --preload.
Result<Ok> configure_program(const RawOptions& raw, const HostFacts& host, LaunchConfig& c) {
  // The program: with a prefix command, an unknown option lands here as the "program".
  if (raw.program_and_args.empty())
    return usage_error("no program given (usage: ddprun [options] PROGRAM [ARGS...])");
  const std::string& first = raw.program_and_args.front();
  if (first.size() > 1 && first[0] == '-') {
    return usage_error(unknown_option_message(first));
  }
  if (first.empty()) return usage_error("the program name is empty");
  auto kind = resolve_program_kind(raw);
  if (!kind) return kind.error();
  c.program_kind = *kind;
  c.program = first;
  c.program_args.assign(raw.program_and_args.begin() + 1, raw.program_and_args.end());
  c.python = !raw.python.empty()
                 ? raw.python
                 : host.python_exec.value_or(host.installed_python.value_or("python3"));
  if (raw.preload_given || !raw.preload.empty()) {
    if (c.program_kind == ProgramKind::Executable) {
      return usage_error(fmt::format(
          "--preload: '{}' is not a Python program (.py or -m); only those can be preloaded",
          c.program));
    }
    auto modules = parse_preload_modules(raw.preload);
    if (!modules) return modules.error();
    c.preload = std::move(*modules);
  }
  if (!raw.preload_timeout.empty()) {
    auto seconds = parse_seconds("--preload-timeout", raw.preload_timeout);
    if (!seconds) return seconds.error();
    if (*seconds <= 0) return usage_error("--preload-timeout: must be more than 0 seconds");
    c.preload_timeout = std::chrono::milliseconds(static_cast<long long>(*seconds * 1000.0));
  }

  return Ok{};
}

/// Processes per node against the visible GPUs.
Result<Ok> configure_gpus(const RawOptions& raw, const HostFacts& host, ConfiguredLaunch& out) {
  LaunchConfig& c = out.config;
  c.gpus = visible_gpus(host.cuda_visible_devices, host.driver_gpu_count);
  auto nproc = resolve_nproc(raw.nproc_per_node, c.gpus, host);
  if (!nproc) return nproc.error();
  c.nproc_per_node = *nproc;
  if (!c.gpus.empty() && c.nproc_per_node > static_cast<int>(c.gpus.size())) {
    if (raw.bind_gpu) {
      return usage_error(fmt::format("--bind-gpu: {} processes per node but only {} visible GPU(s)",
                                     c.nproc_per_node, c.gpus.size()));
    }
    out.notices.push_back(fmt::format(
        "warning: {} processes per node but only {} visible GPU(s); some processes share a GPU",
        c.nproc_per_node, c.gpus.size()));
  }
  c.bind_gpu = raw.bind_gpu;
  if (c.bind_gpu && c.gpus.empty()) return usage_error("--bind-gpu: no GPU is visible");

  return Ok{};
}

/// The rendezvous backend, --rdzv_conf (one table: rdzv_conf.hpp), the elastic flags that spell its
/// keys, --exclude-hosts.
Result<Ok> configure_rdzv_conf(const RawOptions& raw, ConfiguredLaunch& out) {
  LaunchConfig& c = out.config;
  c.rdzv_backend = raw.rdzv_backend;
  static const std::set<std::string> kBackends{"static", "c10d", "etcd", "etcd-v2"};
  if (!kBackends.count(c.rdzv_backend)) {
    return usage_error(fmt::format("--rdzv_backend: '{}' is not one of static, c10d, etcd, etcd-v2",
                                   c.rdzv_backend));
  }
  auto conf = parse_key_values("--rdzv_conf", unquoted(raw.rdzv_conf));
  if (!conf) return conf.error();
  for (auto& [key, value] : *conf) {
    if (find_rdzv_conf_key(key) == nullptr) {
      // torchrun ignores keys it does not read; a typo ignored in silence is worse: a warning,
      // naming the key it probably meant.
      std::vector<std::string> known;
      for (const auto& entry : rdzv_conf_keys()) known.emplace_back(entry.key);
      const auto close = closest_spelling(key, known);
      out.notices.push_back(fmt::format("warning: --rdzv_conf: unknown key '{}' ignored{}", key,
                                        close ? fmt::format(" (did you mean {}?)", *close) : ""));
      continue;
    }
    c.rdzv_conf[key] = unquoted(value);
  }
  // The elastic flags are spellings of their --rdzv_conf keys (the flag wins), checked here by
  // their key's own parser (a bad value is an error on one node too); multinode_settings() reads
  // them from rdzv_conf like the keys.
  for (const auto& [flag, key, value] :
       {std::tuple{"--max-rescales", "max_rescales", &raw.max_rescales},
        std::tuple{"--node-failure-limit", "node_failure_limit", &raw.node_failure_limit}}) {
    if (value->empty()) continue;
    MultiNodeSettings checked;
    if (auto ok = find_rdzv_conf_key(key)->apply(flag, *value, checked); !ok) return ok.error();
    c.rdzv_conf[key] = *value;
  }
  for (size_t at = 0; at < raw.exclude_hosts.size();) {
    const size_t comma = std::min(raw.exclude_hosts.find(',', at), raw.exclude_hosts.size());
    std::string host = raw.exclude_hosts.substr(at, comma - at);
    if (host.empty())
      return usage_error("--exclude-hosts: an empty host name (expected H1,H2,...)");
    c.exclude_hosts.push_back(std::move(host));
    at = comma + 1;
  }
  return Ok{};
}

/// The job id, the endpoint, the master address and port, the store proxy and --standalone.
Result<Ok> configure_rendezvous(const RawOptions& raw, const HostFacts& host,
                                const scheduler::NodeSettings& nodes, ConfiguredLaunch& out) {
  LaunchConfig& c = out.config;
  c.run_id = nodes.rdzv_id ? nodes.rdzv_id->value : "none";
  c.run_id_given = nodes.rdzv_id.has_value();
  c.rdzv_endpoint = raw.rdzv_endpoint;
  c.local_addr = raw.local_addr;
  // The scheduler's master host and port matter only across nodes: a one-node job under a
  // scheduler keeps 127.0.0.1 and a free port, so two steps on one node cannot collide.
  const bool scheduler_master = nodes.master_from_scheduler();
  c.master_addr = nodes.master_addr && (c.multi_node() || !scheduler_master)
                      ? nodes.master_addr->value
                      : "127.0.0.1";
  if (nodes.master_port && (c.multi_node() || is_explicit(nodes.master_port->origin))) {
    c.master_port = nodes.master_port->value;
  } else {
    c.master_port = c.multi_node() ? 29500 : 0;
  }
  if (!c.rdzv_endpoint.empty()) {
    // Only etcd lists several endpoints (its members). A c10d or static store has no standby:
    // its host is a single point of failure, as in torchrun.
    const auto comma = c.rdzv_endpoint.find(',');
    const bool lists_members = c.rdzv_backend == "etcd" || c.rdzv_backend == "etcd-v2";
    if (comma != std::string::npos && !lists_members) {
      return usage_error(fmt::format(
          "--rdzv_endpoint: '{}' names more than one store, but the {} store has no standby; "
          "for no single point of failure use --rdzv_backend etcd with the etcd members as "
          "--rdzv_endpoint",
          c.rdzv_endpoint, c.rdzv_backend));
    }
    auto endpoint = parse_host_port("--rdzv_endpoint", c.rdzv_endpoint.substr(0, comma));
    if (!endpoint) return endpoint.error();
    if (endpoint->host.empty()) {
      return usage_error(fmt::format("--rdzv_endpoint: '{}' has no host", c.rdzv_endpoint));
    }
    if (c.rdzv_backend == "static") {  // torchrun: the static store lives at the endpoint
      c.master_addr = endpoint->host;
      if (endpoint->port != 0) c.master_port = endpoint->port;
    }
  }
  if (raw.store_proxy == "on") {
    c.store_proxy = true;
  } else if (raw.store_proxy == "auto") {
    // Where it pays (docs/rendezvous.md, "When it pays"): from 1024 ranks a direct root holds
    // more descriptors than the usual soft RLIMIT_NOFILE and its CPU is 5x what proxies cost it.
    // Below that the root is not loaded, and workers keep torchrun's MASTER_ADDR (the root's
    // host, which some programs use to reach rank 0 themselves). One rank per node gains nothing.
    constexpr int kStoreProxyAutoMinRanks = 1024;
    c.store_proxy =
        c.multi_node() && c.nproc_per_node > 1 && c.world_size() >= kStoreProxyAutoMinRanks;
  } else if (raw.store_proxy != "off") {
    return usage_error("--store-proxy must be on, off or auto, got '" + raw.store_proxy + "'");
  }
  if (!raw.store_proxy_max_watched_keys.empty()) {
    auto n = parse_integer("--store-proxy-max-watched-keys", raw.store_proxy_max_watched_keys, 1,
                           1'000'000'000);
    if (!n) return n.error();
    c.store_proxy_max_watched_keys = static_cast<std::size_t>(*n);
  }
  c.standalone = raw.standalone;
  if (c.standalone) {
    if (c.multi_node())
      return usage_error("--standalone runs one node; drop --nnodes or set it to 1");
    c.run_id = host.fresh_run_id;
    c.master_addr = "127.0.0.1";
    if (raw.master_port.empty()) c.master_port = 0;
  }
  out.master_needs_resolving =
      c.multi_node() && scheduler_master && c.master_addr == nodes.master_addr->value;
  return Ok{};
}

/// Restarts, grace, signals.
Result<Ok> configure_supervision(const RawOptions& raw, const HostFacts& host, LaunchConfig& c) {
  // Supervision.
  auto restarts = parse_integer("--max_restarts", raw.max_restarts, 0, 1'000'000);
  if (!restarts) return restarts.error();
  c.max_restarts = static_cast<int>(*restarts);
  auto interval = parse_seconds("--monitor_interval", raw.monitor_interval);
  if (!interval) return interval.error();
  c.monitor_interval_s = *interval;
  static const std::set<std::string> kStartMethods{"spawn", "fork", "forkserver"};
  if (!kStartMethods.count(raw.start_method)) {
    return usage_error(fmt::format("--start_method: '{}' is not one of spawn, fork, forkserver",
                                   raw.start_method));
  }
  c.start_method = raw.start_method;
  if (raw.role.empty()) return usage_error("--role: the role name is empty");
  c.role = raw.role;
  std::string grace_text = raw.shutdown_timeout;
  std::string grace_flag = "--shutdown-timeout";
  if (grace_text.empty()) {  // torchrun: TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s
    auto it = host.environment.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
    grace_text = it != host.environment.end() ? it->second : "30";
    grace_flag = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
  }
  auto grace = parse_seconds(grace_flag, grace_text);
  if (!grace) return grace.error();
  c.shutdown_timeout = std::chrono::milliseconds(static_cast<long long>(*grace * 1000.0));
  auto stop_signals = parse_signal_list(raw.signals_to_handle);
  if (!stop_signals) return stop_signals.error();
  c.stop_signals = *stop_signals;

  return Ok{};
}

/// torchrun's plugin flags (defaults only), NUMA binding, virtual local ranks.
Result<Ok> configure_placement(const RawOptions& raw, const HostFacts& host, LaunchConfig& c) {
  // torchrun's Python plugins: ddprun has no plugin loader, so only their defaults are accepted.
  if (!raw.logs_specs.empty() && raw.logs_specs != "default") {
    return usage_error(
        fmt::format("--logs-specs: '{}' names a torchrun Python plugin; ddprun accepts "
                    "only default (use --log-dir, --redirects, --tee, --events)",
                    raw.logs_specs));
  }
  static const std::set<std::string> kEventHandlers{"null", "default", "dynamic_rendezvous",
                                                    "console"};
  if (!kEventHandlers.count(raw.event_log_handler)) {
    return usage_error(
        fmt::format("--event-log-handler: '{}' names a torchrun Python plugin; ddprun "
                    "accepts null, default or console (use --events FILE|-|fd:N for "
                    "JSON events)",
                    raw.event_log_handler));
  }
  static const std::set<std::string> kNumaModes{"", "node", "socket", "exclusive", "core-complex"};
  if (!kNumaModes.count(raw.numa_binding)) {
    return usage_error(
        fmt::format("--numa-binding: '{}' is not one of node, socket, exclusive, "
                    "core-complex",
                    raw.numa_binding));
  }
  c.numa_binding = raw.numa_binding;
  c.virtual_local_rank = raw.virtual_local_rank;
  if (c.virtual_local_rank && host.cuda_visible_devices &&
      c.nproc_per_node > static_cast<int>(c.gpus.size())) {
    return usage_error(
        fmt::format("--virtual-local-rank: {} workers but CUDA_VISIBLE_DEVICES='{}' names "
                    "{} device(s)",
                    c.nproc_per_node, *host.cuda_visible_devices, c.gpus.size()));
  }

  return Ok{};
}

/// Logs, console filters, events, line prefixes, colour, health, OMP_NUM_THREADS.
Result<Ok> configure_output(const RawOptions& raw, const HostFacts& host, ConfiguredLaunch& out) {
  LaunchConfig& c = out.config;
  // Output.
  c.log_dir = raw.log_dir;
  auto redirects = parse_stream_spec("--redirects", raw.redirects);
  if (!redirects) return redirects.error();
  c.redirects = *redirects;
  auto tee = parse_stream_spec("--tee", raw.tee);
  if (!tee) return tee.error();
  c.tee = *tee;
  auto filter = parse_ranks_filter(raw.local_ranks_filter);
  if (!filter) return filter.error();
  c.console_ranks = *filter;
  if (c.console_ranks) {
    for (int r : *c.console_ranks) {
      if (r >= c.nproc_per_node) {
        return usage_error(
            fmt::format("--local_ranks_filter: local rank {} does not exist ({} per node)", r,
                        c.nproc_per_node));
      }
    }
  }
  c.events = raw.events;
  if (c.events.rfind("fd:", 0) == 0) {
    auto fd = parse_integer("--events fd", std::string_view(c.events).substr(3), 0, 1'000'000);
    if (!fd)
      return usage_error(
          fmt::format("--events: '{}' is not fd:N with N a descriptor number", c.events));
  }
  // torchrun's console handler logs events to stderr; ddprun writes its JSON events there.
  if (c.events.empty() && raw.event_log_handler == "console") c.events = "fd:2";
  c.line_prefix.none = raw.no_prefix;
  if (!raw.log_line_prefix_template.empty()) {
    c.line_prefix.tmpl = raw.log_line_prefix_template;
  } else if (auto it = host.environment.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
             it != host.environment.end() && !it->second.empty()) {
    c.line_prefix.tmpl = it->second;
  }
  if (c.line_prefix.none && c.line_prefix.tmpl && !raw.log_line_prefix_template.empty()) {
    return usage_error("--no-prefix and --log-line-prefix-template cannot be used together");
  }
  auto color = parse_color_mode(raw.color);
  if (!color) return color.error();
  c.color = *color;
  c.duplicate_stdout_filters = comma_list(raw.duplicate_stdout_filters);
  c.duplicate_stderr_filters = comma_list(raw.duplicate_stderr_filters);
  c.dry_run = raw.dry_run;
  auto health = health::health_settings_from(raw.health, host.environment);
  if (!health) return health.error();
  c.health = *health;

  c.default_omp_threads = !host.omp_num_threads_set && c.nproc_per_node > 1;
  if (c.default_omp_threads) {
    out.notices.push_back(
        "setting OMP_NUM_THREADS=1 for each worker (it was unset and nproc_per_node > 1); "
        "set it yourself to tune");
  }
  return Ok{};
}

}  // namespace

Result<ConfiguredLaunch> config_from_options(const RawOptions& raw, const HostFacts& host) {
  ConfiguredLaunch out;
  if (auto ok = configure_program(raw, host, out.config); !ok) return ok.error();
  // Nodes: typed flags > PET_* > the scheduler's environment > ddprun's defaults.
  auto plan = plan_launch_nodes(raw, host.environment);
  if (!plan) return plan.error();
  const scheduler::NodeSettings& nodes = plan->settings;
  if (nodes.nnodes) out.config.nnodes = NodeRange{nodes.nnodes->value.min, nodes.nnodes->value.max};
  if (nodes.node_rank) out.config.node_rank = nodes.node_rank->value;
  for (const auto& note : nodes.notes) out.notices.push_back(fmt::format("note: {}", note));

  if (auto ok = configure_gpus(raw, host, out); !ok) return ok.error();
  if (auto ok = configure_rdzv_conf(raw, out); !ok) return ok.error();
  if (auto ok = configure_rendezvous(raw, host, nodes, out); !ok) return ok.error();
  out.node_plan = std::move(*plan);
  if (auto ok = configure_supervision(raw, host, out.config); !ok) return ok.error();
  if (auto ok = configure_placement(raw, host, out.config); !ok) return ok.error();
  if (auto ok = configure_output(raw, host, out); !ok) return ok.error();
  return out;
}

}  // namespace ddp::launcher
