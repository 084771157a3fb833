#pragma once
/// Types shared by the scheduler detectors, the merge and the report.
///
/// A detector reads an environment (a plain map, never the process's own environ) and says which
/// node-level launch values a scheduler implies. Every value remembers the variable it came from,
/// so `ddprun --print-env-detect` and every error can name it.

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::launcher::scheduler {

/// An environment: variable name to value. Tests build it from fixture files, ddprun from environ.
using Env = std::map<std::string, std::string>;

/// Any bad input found while detecting or merging: a one-line message that names the variable
/// or flag at fault (and both sources when two of them contradict).
class SchedulerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A value together with where it came from.
template <typename T>
struct Sourced {
  T value{};
  std::string origin;  ///< "SLURM_NODEID", "--node_rank", "PET_NNODES", "default", ...
  std::string raw;     ///< the text as found there ("n[1-2]", "1234"); empty when not from text
  std::string how;     ///< how value was derived from raw when it is not raw itself; may be empty
};

/// A node count, or an elastic range "MIN:MAX" as torchrun's --nnodes accepts it.
struct NodeRange {
  int min = 1;
  int max = 1;
  bool operator==(const NodeRange&) const = default;
  bool contains(int n) const { return n >= min && n <= max; }
};

/// What one scheduler's environment implies for this ddprun (one ddprun per node).
/// Absent optionals mean the scheduler does not provide that value.
struct SchedulerDefaults {
  std::string
      scheduler;  ///< detector name: "slurm", "openmpi", "pmix", "pmi", "k8s-indexed", "kubeflow"
  std::string trigger;  ///< the variable whose presence selected this detector
  std::optional<Sourced<int>> nnodes;
  std::optional<Sourced<int>> node_rank;
  std::optional<Sourced<std::string>> master_addr;  ///< a host name as the scheduler spells it
  std::optional<Sourced<int>> master_port;
  std::optional<Sourced<std::string>> job_id;  ///< also the default rendezvous id
  /// Set when the environment shows ddprun was started the wrong way (e.g. once per Slurm task).
  /// The merge raises it as an error as soon as any scheduler value would be used.
  std::optional<std::string> refusal;
  std::vector<std::string>
      notes;  ///< facts worth showing in the report (assumptions, ignored vars)
};

/// How the master host name became an address (see resolve_master_host).
struct HostResolution {
  std::string host;     ///< the name asked for, e.g. "n1"
  std::string address;  ///< numeric address, e.g. "127.0.0.1"
  std::string how;      ///< "DNS" or "Slurm NodeAddr (scontrol show node n1)"
};

}  // namespace ddp::launcher::scheduler
