// SPDX-License-Identifier: MIT
#include "launcher/config/cli.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "launcher/common/usage_error.hpp"
#include "launcher/config/did_you_mean.hpp"
#include "launcher/config/rdzv_conf.hpp"

namespace ddp::launcher {
namespace {

/// One table row per option: spellings, metavar, PET_ variable, target field and help (style R4).
/// Exactly one of `text`, `flag`, `health_text` and `health_flag` is set (the health options are
/// members of RawOptions::health, docs/health.md).
struct OptionSpec {
  const char* names;    // CLI11 name list
  const char* metavar;  // nullptr for flags
  const char* env;      // PET_ variable: torchrun's own flags only
  std::string RawOptions::*text;
  bool RawOptions::*flag;
  const char* choices;  // space-separated, or nullptr
  const char* help;
  std::string health::RawHealthOptions::*health_text = nullptr;
  bool health::RawHealthOptions::*health_flag = nullptr;
};

// torchrun 2.15's flags in its --help order, then ddprun's own. The five node options have no
// envname: plan_launch_nodes() reads their PET_* variables next to the scheduler's environment, so
// that its messages can tell the sources apart.
constexpr OptionSpec kOptions[] = {
    {"--nnodes", "N|MIN:MAX", nullptr, &RawOptions::nnodes, nullptr, nullptr,
     "Number of nodes, N or MIN:MAX (default: PET_NNODES, the scheduler's, else 1:1)"},
    {"--nproc-per-node,--nproc_per_node", "N|gpu|cpu|auto", "PET_NPROC_PER_NODE",
     &RawOptions::nproc_per_node, nullptr, "gpu cpu auto",
     "Workers per node: N, gpu, cpu or auto (default 1)"},
    {"--rdzv-backend,--rdzv_backend", "BACKEND", "PET_RDZV_BACKEND", &RawOptions::rdzv_backend,
     nullptr, "static c10d etcd etcd-v2",
     "Rendezvous backend: static (default), c10d or etcd (etcd-v2 is the same)"},
    {"--rdzv-endpoint,--rdzv_endpoint", "HOST[:PORT]", "PET_RDZV_ENDPOINT",
     &RawOptions::rdzv_endpoint, nullptr, nullptr, "Rendezvous endpoint host[:port]"},
    {"--rdzv-id,--rdzv_id", "ID", nullptr, &RawOptions::rdzv_id, nullptr, nullptr,
     "Job id shared by all nodes (default: PET_RDZV_ID, the scheduler's job id, else none)"},
    {"--rdzv-conf,--rdzv_conf", "K=V[,K=V...]", "PET_RDZV_CONF", &RawOptions::rdzv_conf, nullptr,
     nullptr,
     "Rendezvous settings k1=v1,k2=v2 (an unknown key: a warning with the closest known key; "
     "torchrun ignores it)"},
    {"--standalone", nullptr, "PET_STANDALONE", nullptr, &RawOptions::standalone, nullptr,
     "Single-node job: free port, fresh run id"},
    {"--max-restarts,--max_restarts", "N", "PET_MAX_RESTARTS", &RawOptions::max_restarts, nullptr,
     nullptr, "Restarts of the worker group after a failure (default 0)"},
    {"--monitor-interval,--monitor_interval", "SECONDS", "PET_MONITOR_INTERVAL",
     &RawOptions::monitor_interval, nullptr, nullptr,
     "Accepted for compatibility; ddprun reacts to exits at once"},
    {"--start-method,--start_method", "METHOD", "PET_START_METHOD", &RawOptions::start_method,
     nullptr, "spawn fork forkserver",
     "Accepted for compatibility (spawn, fork, forkserver); no effect on programs"},
    {"--event-log-handler,--event_log_handler", "NAME", "PET_EVENT_LOG_HANDLER",
     &RawOptions::event_log_handler, nullptr, "null default console",
     "torchrun's Python event handler: null (default) or console (ddprun's JSON events on stderr); "
     "for a file use --events"},
    {"--role", "NAME", "PET_ROLE", &RawOptions::role, nullptr, nullptr,
     "Worker role name (default: default)"},
    {"-m,--module", nullptr, "PET_MODULE", nullptr, &RawOptions::module, nullptr,
     "Run the program as a Python module (-m)"},
    {"--no-python,--no_python", nullptr, "PET_NO_PYTHON", nullptr, &RawOptions::no_python, nullptr,
     "Execute the program directly, without Python"},
    {"--run-path,--run_path", nullptr, "PET_RUN_PATH", nullptr, &RawOptions::run_path, nullptr,
     "Run the program through Python's runpy.run_path, as torchrun does (wins over --no-python)"},
    {"--log-dir,--log_dir", "DIR", "PET_LOG_DIR", &RawOptions::log_dir, nullptr, nullptr,
     "Directory for per-attempt, per-rank logs and error files"},
    {"-r,--redirects", "0-3|MAP", "PET_REDIRECTS", &RawOptions::redirects, nullptr, nullptr,
     "Send std streams to log files only: 0-3 or a map such as 0:1,1:2"},
    {"-t,--tee", "0-3|MAP", "PET_TEE", &RawOptions::tee, nullptr, nullptr,
     "Send std streams to log files and the console: 0-3 or a map such as 0:1,1:2"},
    {"--log-line-prefix-template,--log_line_prefix_template", "TEMPLATE",
     "PET_LOG_LINE_PREFIX_TEMPLATE", &RawOptions::log_line_prefix_template, nullptr, nullptr,
     "Prefix of console lines, with ${role_name}, ${rank}, ${local_rank}, ${hostname} (default: "
     "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else [rank${rank}]:)"},
    {"--local-ranks-filter,--local_ranks_filter", "RANKS", "PET_LOCAL_RANKS_FILTER",
     &RawOptions::local_ranks_filter, nullptr, nullptr,
     "Show only these local ranks on the console, e.g. 0,3"},
    {"--duplicate-stdout-filters,--duplicate_stdout_filters", "WORDS",
     "PET_DUPLICATE_STDOUT_FILTERS", &RawOptions::duplicate_stdout_filters, nullptr, nullptr,
     "Also copy --tee'd stdout lines containing any of these words (comma list, ,, for a comma) "
     "to <run dir>/attempt_N/filtered_stdout.log"},
    {"--duplicate-stderr-filters,--duplicate_stderr_filters", "WORDS",
     "PET_DUPLICATE_STDERR_FILTERS", &RawOptions::duplicate_stderr_filters, nullptr, nullptr,
     "The same for stderr (filtered_stderr.log)"},
    {"--node-rank,--node_rank", "RANK", nullptr, &RawOptions::node_rank, nullptr, nullptr,
     "Rank of this node, 0..nnodes-1 (default: PET_NODE_RANK, the scheduler's, else 0)"},
    {"--master-addr,--master_addr", "ADDR", nullptr, &RawOptions::master_addr, nullptr, nullptr,
     "Address of the rank-0 node (default: PET_MASTER_ADDR, the scheduler's first node, else "
     "127.0.0.1)"},
    {"--master-port,--master_port", "PORT", nullptr, &RawOptions::master_port, nullptr, nullptr,
     "Port on the rank-0 node (default: PET_MASTER_PORT, 15000 + the scheduler's job id, else a "
     "free port on one node, 29500 on several)"},
    {"--local-addr,--local_addr", "ADDR", "PET_LOCAL_ADDR", &RawOptions::local_addr, nullptr,
     nullptr, "Address of this node for rendezvous"},
    {"--logs-specs,--logs_specs", "NAME", nullptr, &RawOptions::logs_specs, nullptr, "default",
     "torchrun's Python log plugin: only default; see --log-dir, --redirects, --tee, --events"},
    {"--numa-binding,--numa_binding", "MODE", nullptr, &RawOptions::numa_binding, nullptr,
     "node socket exclusive core-complex",
     "Bind each worker's CPUs and memory near its GPU (from sysfs): node, socket, exclusive or "
     "core-complex; without GPUs, spread workers over the NUMA nodes"},
    {"--signals-to-handle,--signals_to_handle", "SIGNALS", "PET_SIGNALS_TO_HANDLE",
     &RawOptions::signals_to_handle, nullptr, nullptr,
     "Signals that stop the job: passed to the workers, SIGKILL after --shutdown-timeout "
     "(default SIGTERM,SIGINT,SIGHUP,SIGQUIT); SIGUSR1/SIGUSR2 not listed are only forwarded"},
    {"--shutdown-timeout,--shutdown_timeout", "SECONDS", "PET_SHUTDOWN_TIMEOUT",
     &RawOptions::shutdown_timeout, nullptr, nullptr,
     "Seconds between SIGTERM and SIGKILL when stopping workers (default: "
     "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30)"},
    {"--virtual-local-rank,--virtual_local_rank", nullptr, "PET_VIRTUAL_LOCAL_RANK", nullptr,
     &RawOptions::virtual_local_rank, nullptr,
     "Give every worker LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES of its own device"},
    {"--print-completion,--print_completion", "SHELL", nullptr, &RawOptions::print_completion,
     nullptr, "bash zsh", "Print ddprun's bash or zsh completion script and exit"},
    // ddprun's own flags.
    {"--events", "FILE|-|fd:N", nullptr, &RawOptions::events, nullptr, nullptr,
     "Write one JSON object per line for every launch event to FILE, to fd N, or - for stdout "
     "(then stdout holds only events and the workers' stdout goes to stderr)"},
    {"--no-prefix,--no_prefix", nullptr, nullptr, nullptr, &RawOptions::no_prefix, nullptr,
     "Print worker lines as the workers wrote them (still whole lines, never torn)"},
    {"--color", "WHEN", nullptr, &RawOptions::color, nullptr, "auto always never",
     "Color the rank prefixes: auto (a terminal and no NO_COLOR; default), always or never"},
    {"--store-proxy,--store_proxy", "on|off|auto", "DDPRUN_STORE_PROXY", &RawOptions::store_proxy,
     nullptr, "on off auto",
     "Serve the workers through a store proxy on this node (fewer root-store connections and "
     "requests): on, off or auto (default: on for multi-node jobs of 1024+ ranks, 2+ per node)"},
    {"--store-proxy-max-watched-keys,--store_proxy_max_watched_keys", "N",
     "DDPRUN_STORE_PROXY_MAX_WATCHED_KEYS", &RawOptions::store_proxy_max_watched_keys, nullptr,
     nullptr,
     "With --store-proxy: keys the proxy watches at once on its root link for the workers' "
     "WAITs (default 262144)"},
    {"--python", "PYTHON", nullptr, &RawOptions::python, nullptr, nullptr,
     "Interpreter for .py programs and -m (default $PYTHON_EXEC, else python3)"},
    {"--preload", "MODULES", nullptr, &RawOptions::preload, nullptr, nullptr,
     "Import these modules (e.g. torch,numpy) once in a per-node interpreter and fork every "
     "Python worker from it, at start and at every restart (docs/warm-start.md)"},
    {"--preload-timeout,--preload_timeout", "SECONDS", nullptr, &RawOptions::preload_timeout,
     nullptr, nullptr,
     "With --preload: how long the imports may take before the workers are exec'd without it "
     "(default 300)"},
    {"--scheduler", "NAME", nullptr, &RawOptions::scheduler, nullptr,
     "auto none slurm openmpi pmix pmi k8s-indexed kubeflow",
     "Cluster scheduler whose environment gives the node values: auto (default), none, slurm, "
     "openmpi, pmix, pmi, k8s-indexed, kubeflow (--standalone implies none)"},
    {"--dry-run,--dry_run", nullptr, nullptr, nullptr, &RawOptions::dry_run, nullptr,
     "Print each rank's command and environment; start nothing"},
    {"--bind-gpu,--bind_gpu", nullptr, nullptr, nullptr, &RawOptions::bind_gpu, nullptr,
     "Give each worker CUDA_VISIBLE_DEVICES of its one device (by local rank)"},
    {"--print-env-detect,--print_env_detect", nullptr, nullptr, nullptr,
     &RawOptions::print_env_detect, nullptr,
     "Print which scheduler was detected and where every node value comes from; start nothing"},
    {"--store-only,--store_only", nullptr, nullptr, nullptr, &RawOptions::store_only, nullptr,
     "Serve only the job's TCP store at --master_addr (default 127.0.0.1):--master_port (default "
     "29500; 0 = a free port, printed first) until SIGINT/SIGTERM; no program"},
    {"--max-rescales,--max_rescales", "N", nullptr, &RawOptions::max_rescales, nullptr, nullptr,
     "c10d MIN:MAX: membership changes allowed (default 100; = --rdzv_conf max_rescales=N)"},
    {"--node-failure-limit,--node_failure_limit", "K", nullptr, &RawOptions::node_failure_limit,
     nullptr, nullptr,
     "c10d MIN:MAX: quarantine a node whose workers fail K attempts in a row (default 0: off)"},
    {"--exclude-hosts,--exclude_hosts", "H1,H2", nullptr, &RawOptions::exclude_hosts, nullptr,
     nullptr, "Multi-node: refuse joins from these nodes (host names, or their --local_addr)"},
    // Health (docs/health.md). ddprun's own flags: no PET_ variable (torchrun's
    // TORCHELASTIC_ENABLE_FILE_TIMER and TORCHELASTIC_HEALTH_CHECK_PORT are read in
    // health_options).
    {"--hang-timeout,--hang_timeout", "SECONDS", nullptr, nullptr, nullptr, nullptr,
     "Seconds without progress from any rank (heartbeat, else output line, else timer request) "
     "after which the job is hung: stacks saved, stopped, exit 75 (default 0: off)",
     &health::RawHealthOptions::hang_timeout},
    {"--hang-startup-timeout,--hang_startup_timeout", "SECONDS", nullptr, nullptr, nullptr, nullptr,
     "The hang timeout until every rank of an attempt has shown progress (at most this long "
     "after its start), if longer (default 60)",
     &health::RawHealthOptions::hang_startup_timeout},
    {"--no-progress-restarts,--no_progress_restarts", "K", nullptr, nullptr, nullptr, nullptr,
     "Stop restarting after K restarts in a row that reached no new step (default 2; 0: off)",
     &health::RawHealthOptions::no_progress_restarts},
    {"--straggler-ratio,--straggler_ratio", "R", nullptr, nullptr, nullptr, nullptr,
     "Report a rank whose step rate stays below R x the median for a minute (default 0.5; 0: off)",
     &health::RawHealthOptions::straggler_ratio},
    {"--status-port,--status_port", "PORT", nullptr, nullptr, nullptr, nullptr,
     "Serve /healthz, /status, /metrics on this port (0: a free one; default "
     "TORCHELASTIC_HEALTH_CHECK_PORT, else none)",
     &health::RawHealthOptions::status_port},
    {"--status-addr,--status_addr", "ADDR", nullptr, nullptr, nullptr, nullptr,
     "Address of the status endpoint (default 127.0.0.1)", &health::RawHealthOptions::status_addr},
    {"--status-allow-host,--status_allow_host", "H1,H2", nullptr, nullptr, nullptr, nullptr,
     "Host names the status endpoint answers besides addresses, localhost and this host's name "
     "(others: 421, against DNS rebinding; * allows any)",
     &health::RawHealthOptions::status_allow_host},
    {"--status-linger,--status_linger", "SECONDS", nullptr, nullptr, nullptr, nullptr,
     "After the job ends, keep serving its final state this long if a viewer asked for /status "
     "during the run (default 5; 0: off; none when a signal to ddprun ended the job; a signal "
     "cuts it)",
     &health::RawHealthOptions::status_linger},
    {"--file-timer,--file_timer", nullptr, nullptr, nullptr, nullptr, nullptr,
     "Serve torchrun's watchdog timers (as TORCHELASTIC_ENABLE_FILE_TIMER=1)", nullptr,
     &health::RawHealthOptions::file_timer},
};

/// --help: the options a first job needs come first, then the rest by topic (CLI11 option
/// groups, in this order). Each option's first long name; every option is in exactly one group.
struct HelpGroup {
  const char* title;
  const char* options;  // space-separated, in display order
};
constexpr HelpGroup kHelpGroups[] = {
    {"Common options",
     "--help --nproc-per-node --standalone --nnodes --node-rank --master-addr --master-port "
     "--rdzv-backend --rdzv-endpoint --rdzv-id --max-restarts --module --no-python --log-dir "
     "--dry-run --version"},
    {"Multi-node and elastic jobs",
     "--rdzv-conf --local-addr --max-rescales --node-failure-limit --exclude-hosts --scheduler "
     "--print-env-detect"},
    {"Output and logs",
     "--redirects --tee --log-line-prefix-template --local-ranks-filter --no-prefix --color "
     "--events --duplicate-stdout-filters --duplicate-stderr-filters --event-log-handler"},
    {"Workers",
     "--python --preload --preload-timeout --run-path --role --bind-gpu --virtual-local-rank "
     "--numa-binding "
     "--signals-to-handle --shutdown-timeout"},
    {"Health and views (ddprun top, ddprun report)",
     "--status-port --status-addr --status-allow-host --status-linger --hang-timeout "
     "--hang-startup-timeout --no-progress-restarts "
     "--straggler-ratio --file-timer"},
    {"The store", "--store-only --store-proxy --store-proxy-max-watched-keys"},
    {"torchrun compatibility and shell",
     "--monitor-interval --start-method --logs-specs --print-completion"},
};

/// The commands that look at a job instead of running one (main() dispatches them).
constexpr const char* kCommandsHelp[][2] = {
    {"top [HOST:PORT]",
     "a running job's ranks in the terminal, like htop (this user's local job when omitted)"},
    {"report EVENTS", "what an --events file says happened, as HTML or Markdown"},
    {"help [COMMAND]", "this help, or a command's (ddprun help top)"},
};

constexpr const char* kExamplesHelp[][2] = {
    {"ddprun --nproc-per-node=4 train.py --lr 3",
     "4 workers on this machine; everything after train.py goes to it"},
    {"ddprun --nnodes=2 --node-rank=0 --master-addr=10.0.0.1 --nproc-per-node=8 train.py",
     "node 0 of two (node 1 runs the same with --node-rank=1)"},
};

constexpr size_t kHelpWidth = 100;  // every line of --help fits 100 columns
constexpr size_t kHelpColumn = 36;  // where descriptions start

const OptionSpec* find_spec(const std::string& long_name) {
  for (const auto& spec : kOptions) {
    std::stringstream names(spec.names);
    for (std::string name; std::getline(names, name, ',');) {
      if (name == long_name) return &spec;
    }
  }
  return nullptr;
}

/// `text` broken at spaces into lines of at most `width` columns (a longer word stays whole).
std::vector<std::string> wrap(std::string_view text, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  size_t i = 0;
  while (i < text.size()) {
    const size_t space = text.find(' ', i);
    const std::string_view word =
        text.substr(i, space == std::string_view::npos ? std::string_view::npos : space - i);
    i = space == std::string_view::npos ? text.size() : space + 1;
    if (word.empty()) continue;
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(std::move(line));
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += word;
  }
  if (!line.empty() || lines.empty()) lines.push_back(std::move(line));
  return lines;
}

/// "  NAME   description" with the description wrapped at kHelpWidth; a name too wide for the
/// column puts the description on the lines below it.
std::string help_row(const std::string& name, std::string_view description) {
  const auto lines = wrap(description, kHelpWidth - kHelpColumn);
  std::string out = "  " + name;
  size_t first = 0;
  if (out.size() + 2 <= kHelpColumn) {
    out += std::string(kHelpColumn - out.size(), ' ') + lines.front();
    first = 1;
  }
  out += "\n";
  for (size_t k = first; k < lines.size(); ++k) {
    out += std::string(kHelpColumn, ' ') + lines[k] + "\n";
  }
  return out;
}

std::vector<std::string> split_words(const char* text) {
  std::vector<std::string> out;
  if (text == nullptr) return out;
  std::istringstream in(text);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

std::vector<CliOption> build_table() {
  std::vector<CliOption> table;
  table.push_back({{"--help"}, "-h", false, "", {}, "Print this help and exit"});
  for (const auto& spec : kOptions) {
    CliOption option;
    std::stringstream names(spec.names);
    for (std::string name; std::getline(names, name, ',');) {
      if (name.rfind("--", 0) == 0) {
        option.long_names.push_back(name);
      } else {
        option.short_name = name;
      }
    }
    option.takes_value = spec.text != nullptr || spec.health_text != nullptr;
    option.metavar = spec.metavar ? spec.metavar : "";
    option.choices = split_words(spec.choices);
    option.help = spec.help;
    table.push_back(std::move(option));
  }
  table.push_back({{"--version"}, "", false, "", {}, "Print ddprun's version and exit"});
  return table;
}

/// ddprun's --help: usage, the common options, two examples, the commands, the other option
/// groups, the footer; every line within kHelpWidth columns. CLI11 2.1 neither wraps descriptions
/// nor can name a prefix command's rest, so the whole page is drawn here from the app's groups.
/// Only the dash spelling of each flag is shown; the footer says the underscore one works too.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    std::string out = app->get_description() + "\n\n";
    out += "Usage: ddprun [OPTIONS] PROGRAM [ARGS...]\n";
    out += "       ddprun top|report|help [ARGS...]\n";
    const auto groups = app->get_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      out += "\n" + groups[g] + ":\n";
      for (const CLI::Option* option :
           app->get_options([&](const CLI::Option* o) { return o->get_group() == groups[g]; })) {
        out += help_row(option_name(*option), option->get_description());
      }
      if (g == 0) {
        out += "\nFor example:\n";
        for (const auto& [command, what] : kExamplesHelp) {
          out += "  " + std::string(command) + "\n";
          for (const auto& line : wrap(what, kHelpWidth - 6)) out += "      " + line + "\n";
        }
        out += "\nCommands:\n";
        for (const auto& [command, what] : kCommandsHelp) out += help_row(command, what);
      }
    }
    out += "\n";
    std::istringstream paragraphs(app->get_footer());
    for (std::string paragraph; std::getline(paragraphs, paragraph);) {
      for (const auto& line : wrap(paragraph, kHelpWidth)) out += line + "\n";
    }
    return out;
  }

 private:
  static std::string option_name(const CLI::Option& option) {
    std::string name;
    for (const auto& s : option.get_snames()) name += "-" + s + ", ";
    if (!option.get_lnames().empty()) name += "--" + option.get_lnames().front();
    const std::string metavar = option.get_type_name();
    if (option.get_expected_min() > 0 && !metavar.empty()) name += " " + metavar;
    return name;
  }
};

}  // namespace

const std::vector<CliOption>& launch_option_table() {
  static const std::vector<CliOption> kTable = build_table();
  return kTable;
}

void add_launch_options(CLI::App& app, RawOptions& raw) {
  const std::string common = kHelpGroups[0].title;
  app.get_help_ptr()->group(common)->description("Print this help and exit");
  size_t registered = 0;
  for (const auto& group : kHelpGroups) {
    for (const auto& name : split_words(group.options)) {
      if (name == "--help" || name == "--version") continue;
      const OptionSpec* spec = find_spec(name);
      if (spec == nullptr) throw std::logic_error("help group names an unknown option " + name);
      CLI::Option* option = nullptr;
      if (spec->text != nullptr || spec->health_text != nullptr) {
        std::string& target =
            spec->text != nullptr ? raw.*(spec->text) : raw.health.*(spec->health_text);
        // Like argparse (torchrun), a repeated option takes its last value.
        // --rdzv_conf's keys come from their table (rdzv_conf.hpp), so the list is never short.
        const std::string help =
            std::string_view(spec->names).find("--rdzv_conf") != std::string_view::npos
                ? fmt::format("{}. Keys: {}", spec->help, rdzv_conf_key_names())
                : std::string(spec->help);
        option = app.add_option(spec->names, target, help)
                     ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                     ->type_name(spec->metavar);
      } else {
        bool& target = spec->flag != nullptr ? raw.*(spec->flag) : raw.health.*(spec->health_flag);
        option = app.add_flag(spec->names, target, spec->help);
      }
      if (spec->env != nullptr) option->envname(spec->env);
      option->group(group.title);
      ++registered;
    }
  }
  if (registered != std::size(kOptions)) {
    throw std::logic_error("an option is in no --help group (kHelpGroups)");
  }
  app.set_version_flag("--version", "ddprun " DDPRUN_VERSION, "Print ddprun's version and exit")
      ->group(common);
  app.formatter(std::make_shared<HelpFormatter>());
  // Everything from the program on is passed through: `ddprun train.py --lr 3` never parses --lr.
  app.prefix_command();
  app.footer(
      "PROGRAM [ARGS...]: a .py script (run with PYTHON -u), a module with -m, or any executable.\n"
      "Every --multi-word flag also has torchrun's underscore spelling (--nproc_per_node), and "
      "long options may be abbreviated to any unambiguous prefix (--nproc-per 2).\n"
      "torchrun's flags can also come from PET_<NAME> (e.g. PET_NPROC_PER_NODE); the command line "
      "wins.\nInside Slurm, Open MPI, PMIx/PMI or Kubernetes jobs, --nnodes, --node-rank, "
      "--master-addr, --master-port and --rdzv-id default to the scheduler's values "
      "(see --print-env-detect).\n"
      "Exit codes, every flag in detail: man ddprun, docs/flags.md.");
}

std::string unknown_option_message(std::string_view arg) {
  const std::string_view name = arg.substr(0, arg.find('='));
  std::vector<std::string> known;
  for (const auto& option : launch_option_table()) {
    known.insert(known.end(), option.long_names.begin(), option.long_names.end());
    if (!option.short_name.empty()) known.push_back(option.short_name);
  }
  const auto close = closest_spelling(name, known);
  // Only the name: the value of a mistyped flag may be a secret (--rdzv_conff=token=...).
  return fmt::format("unknown option '{}' ({}options go before the program; see --help)", name,
                     close ? fmt::format("did you mean {}? ", *close) : "");
}

Result<std::vector<std::string>> expand_abbreviations(const std::vector<std::string>& args) {
  const auto& table = launch_option_table();
  std::vector<std::string> out = args;
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string& arg = out[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') break;  // the program starts here
    if (arg[1] != '-') {                                        // short options: -r VALUE, -r3, -m
      const CliOption* match = nullptr;
      for (const auto& option : table) {
        if (!option.short_name.empty() && option.short_name == arg) match = &option;
      }
      if (match && match->takes_value) ++i;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const CliOption* exact = nullptr;
    std::vector<const CliOption*> candidates;
    for (const auto& option : table) {
      for (const auto& long_name : option.long_names) {
        if (long_name == name) exact = &option;
        if (long_name.rfind(name, 0) == 0 &&
            std::find(candidates.begin(), candidates.end(), &option) == candidates.end()) {
          candidates.push_back(&option);
        }
      }
    }
    const CliOption* option = exact;
    if (!option && candidates.size() > 1) {
      std::string names;
      for (const auto* c : candidates) {
        for (const auto& n : c->long_names) names += (names.empty() ? "" : ", ") + n;
      }
      return usage_error(fmt::format("ambiguous option: {} could match {}", name, names));
    }
    if (!option && candidates.size() == 1) {
      option = candidates.front();
      // Keep the spelling family the user started (--nproc_per → --nproc_per_node).
      std::string full = option->long_names.front();
      for (const auto& n : option->long_names) {
        if (n.rfind(name, 0) == 0) {
          full = n;
          break;
        }
      }
      out[i] = eq == std::string::npos ? full : full + arg.substr(eq);
    }
    if (!option) break;  // unknown: config_from_options() names it
    if (option->takes_value && eq == std::string::npos) ++i;
  }
  return out;
}

Result<ParsedCommandLine> parse_command_line(const std::vector<std::string>& typed) {
  auto args = expand_abbreviations(typed);
  if (!args) return args.error();
  ParsedCommandLine parsed;
  CLI::App app{"ddprun: launch and supervise the processes of a distributed PyTorch job", "ddprun"};
  add_launch_options(app, parsed.raw);
  // CLI11 parses a reversed vector (it pops from the back).
  std::vector<std::string> reversed(args->rbegin(), args->rend());
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
    return usage_error(e.what());
  }
  parsed.raw.preload_given = app.count("--preload") > 0;
  parsed.raw.program_and_args = app.remaining();
  // `ddprun [options] -- prog args`: the separator is not part of the program's command line.
  auto& rest = parsed.raw.program_and_args;
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (!parsed.raw.print_completion.empty()) {
    auto script = completion_script(parsed.raw.print_completion);
    if (!script) return script.error();
    std::cout << *script;
    parsed.exit_now = true;
  }
  return parsed;
}

}  // namespace ddp::launcher
