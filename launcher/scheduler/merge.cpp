#include "launcher/scheduler/merge.hpp"

#include <fmt/format.h>

#include "launcher/scheduler/env_values.hpp"

namespace ddp::launcher::scheduler {
namespace {

// The explicit value of one option: the flag if given, else the PET_* variable.
template <typename T>
std::optional<Sourced<T>> pick_explicit(const std::optional<T>& flag, const std::optional<T>& pet,
                                        const char* flag_name, const char* pet_name,
                                        std::vector<std::string>& notes) {
  if (flag) {
    if (pet && !(*pet == *flag)) {
      notes.push_back(fmt::format("{}={} overrides {}={}", flag_name, value_text(*flag), pet_name,
                                  value_text(*pet)));
    }
    return Sourced<T>{*flag, flag_name, value_text(*flag), ""};
  }
  if (pet) return Sourced<T>{*pet, pet_name, value_text(*pet), ""};
  return std::nullopt;
}

// Explicit wins over the scheduler's value without an error; the override is noted.
template <typename T>
std::optional<Sourced<T>> prefer_explicit(std::optional<Sourced<T>> chosen,
                                          const std::optional<Sourced<T>>& from_scheduler,
                                          std::vector<std::string>& notes, bool& used_scheduler) {
  if (chosen) {
    if (from_scheduler && !(from_scheduler->value == chosen->value)) {
      notes.push_back(fmt::format("{} overrides {}", describe_origin(*chosen),
                                  describe_origin(*from_scheduler)));
    }
    return chosen;
  }
  if (from_scheduler) used_scheduler = true;
  return from_scheduler;
}

const char* const kDisableHint = "pass --scheduler=none to ignore the scheduler's environment";

}  // namespace

std::string to_string(const NodeRange& range) {
  return range.min == range.max ? std::to_string(range.min)
                                : fmt::format("{}:{}", range.min, range.max);
}

std::string describe_origin(std::string_view origin, std::string_view raw, std::string_view how) {
  std::string out = raw.empty() ? std::string(origin) : fmt::format("{}={}", origin, raw);
  if (!how.empty()) out += fmt::format(" ({})", how);
  return out;
}

NodeRange parse_node_range(std::string_view text, std::string_view what) {
  auto colon = text.find(':');
  NodeRange range;
  if (colon == std::string_view::npos) {
    range.min = range.max = parse_count(text, what);
  } else {
    range.min = parse_count(text.substr(0, colon), what);
    range.max = parse_count(text.substr(colon + 1), what);
  }
  if (range.min < 1 || range.max < range.min) {
    throw SchedulerError(
        fmt::format("{}='{}' is not a node count N or a range MIN:MAX with "
                    "1 <= MIN <= MAX",
                    what, text));
  }
  return range;
}

NodeOptions pet_options_from_env(const Env& env) {
  NodeOptions out;
  if (auto v = env_get(env, "PET_NNODES")) out.nnodes = parse_node_range(*v, "PET_NNODES");
  if (auto v = env_int(env, {"PET_NODE_RANK"})) out.node_rank = v->value;
  if (auto v = env_get(env, "PET_MASTER_ADDR")) out.master_addr = *v;
  if (auto v = env_int(env, {"PET_MASTER_PORT"})) {
    if (v->value < 1 || v->value > 65535) {
      throw SchedulerError(fmt::format("PET_MASTER_PORT={} is not a port (1-65535)", v->raw));
    }
    out.master_port = v->value;
  }
  if (auto v = env_get(env, "PET_RDZV_ID")) out.rdzv_id = *v;
  return out;
}

bool NodeSettings::master_from_scheduler() const {
  return master_addr && !scheduler.empty() && master_addr->origin.rfind("--", 0) != 0 &&
         master_addr->origin.rfind("PET_", 0) != 0;
}

NodeSettings merge_node_settings(const NodeOptions& flags, const NodeOptions& pet,
                                 const Detection& detection) {
  NodeSettings out;
  const SchedulerDefaults* sched = detection.defaults ? &*detection.defaults : nullptr;
  if (sched) out.scheduler = sched->scheduler;
  auto& notes = out.notes;
  bool used_scheduler = false;

  // Node count: explicit must agree with the scheduler's (a range must contain it).
  auto nnodes = pick_explicit(flags.nnodes, pet.nnodes, "--nnodes", "PET_NNODES", notes);
  if (nnodes) {
    if (sched && sched->nnodes && !nnodes->value.contains(sched->nnodes->value)) {
      throw SchedulerError(fmt::format(
          "{} contradicts {}: the scheduler started ddprun on {} node(s); drop the explicit "
          "value or {}",
          describe_origin(*nnodes), describe_origin(*sched->nnodes), sched->nnodes->value,
          kDisableHint));
    }
    out.nnodes = nnodes;
  } else if (sched && sched->nnodes) {
    const auto& n = *sched->nnodes;
    out.nnodes = Sourced<NodeRange>{{n.value, n.value}, n.origin, n.raw, n.how};
    used_scheduler = true;
  }

  // Node rank: must fit the node count, and explicit must agree with the scheduler's.
  auto rank = pick_explicit(flags.node_rank, pet.node_rank, "--node_rank", "PET_NODE_RANK", notes);
  if (!rank && sched && sched->node_rank) {
    rank = sched->node_rank;
    used_scheduler = true;
  }
  if (rank) {
    const int max_nodes = out.nnodes ? out.nnodes->value.max : 1;
    if (rank->value >= max_nodes) {
      std::string count_origin = out.nnodes
                                     ? describe_origin(*out.nnodes)
                                     : std::string("ddprun's default of 1 node (no --nnodes)");
      throw SchedulerError(fmt::format("{} is out of range: {} gives {} node(s), node ranks 0..{}",
                                       describe_origin(*rank), count_origin, max_nodes,
                                       max_nodes - 1));
    }
    if (sched && sched->node_rank && rank->value != sched->node_rank->value) {
      throw SchedulerError(
          fmt::format("{} contradicts {}: this node's rank is {}; drop the "
                      "explicit value or {}",
                      describe_origin(*rank), describe_origin(*sched->node_rank),
                      sched->node_rank->value, kDisableHint));
    }
    out.node_rank = rank;
  }

  auto addr =
      pick_explicit(flags.master_addr, pet.master_addr, "--master_addr", "PET_MASTER_ADDR", notes);
  out.master_addr =
      prefer_explicit(addr, sched ? sched->master_addr : std::nullopt, notes, used_scheduler);

  bool harmless = false;  // port and rdzv id do not make a refused environment usable
  auto port =
      pick_explicit(flags.master_port, pet.master_port, "--master_port", "PET_MASTER_PORT", notes);
  out.master_port =
      prefer_explicit(port, sched ? sched->master_port : std::nullopt, notes, harmless);
  auto rdzv = pick_explicit(flags.rdzv_id, pet.rdzv_id, "--rdzv_id", "PET_RDZV_ID", notes);
  out.rdzv_id = prefer_explicit(rdzv, sched ? sched->job_id : std::nullopt, notes, harmless);

  if (sched && sched->refusal) {
    if (used_scheduler) throw SchedulerError(*sched->refusal);
    notes.push_back(fmt::format("{} environment not used: {}", sched->scheduler, *sched->refusal));
  }
  return out;
}

}  // namespace ddp::launcher::scheduler
