#pragma once
/// Small helpers that read typed values out of an Env, with errors that name the variable.

#include <optional>
#include <string>
#include <string_view>

#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler {

/// The variable's value, or nullopt when it is unset. An empty value counts as set.
std::optional<std::string> env_get(const Env& env, const std::string& name);

/// The first of `names` that is set, as a Sourced string (origin = that name).
std::optional<Sourced<std::string>> env_first(const Env& env,
                                              std::initializer_list<const char*> names);

/// Parses a non-negative decimal integer; throws SchedulerError naming `what` otherwise.
int parse_count(std::string_view text, std::string_view what);

/// `env_first` parsed with parse_count; the raw text is kept in the result.
std::optional<Sourced<int>> env_int(const Env& env, std::initializer_list<const char*> names);

/// Throws SchedulerError("inconsistent <what> environment: RANK=3 but SIZE=2") unless rank < size.
void require_rank_below(const Sourced<int>& rank, const Sourced<int>& size, std::string_view what);

/// A port that is stable for one job id and unlikely to collide between jobs on one node:
/// 15000 + a numeric id modulo 17768 (the whole id, so ids ending in the same digits differ),
/// or 15000 + a hash modulo 17768 for other ids: 15000..32767, below Linux's ephemeral range.
int port_from_job_id(std::string_view job_id);

/// How port_from_job_id derived the port, for reports: "15000 + job id modulo 17768" or
/// "15000 + hash of the job id modulo 17768".
std::string port_derivation(std::string_view job_id);

}  // namespace ddp::launcher::scheduler
