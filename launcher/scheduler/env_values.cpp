#include "launcher/scheduler/env_values.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>

namespace ddp::launcher::scheduler {

std::optional<std::string> env_get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

std::optional<Sourced<std::string>> env_first(const Env& env,
                                              std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto value = env_get(env, name)) {
      return Sourced<std::string>{*value, name, *value, ""};
    }
  }
  return std::nullopt;
}

int parse_count(std::string_view text, std::string_view what) {
  int value = -1;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end || value < 0) {
    throw SchedulerError(fmt::format("{}='{}' is not a non-negative integer", what, text));
  }
  return value;
}

std::optional<Sourced<int>> env_int(const Env& env, std::initializer_list<const char*> names) {
  auto text = env_first(env, names);
  if (!text) return std::nullopt;
  return Sourced<int>{parse_count(text->value, text->origin), text->origin, text->raw, ""};
}

void require_rank_below(const Sourced<int>& rank, const Sourced<int>& size, std::string_view what) {
  if (rank.value < size.value) return;
  throw SchedulerError(fmt::format("inconsistent {} environment: {}={} but {}={}", what,
                                   rank.origin, rank.raw, size.origin, size.raw));
}

namespace {
bool is_numeric(std::string_view text) {
  bool numeric = !text.empty();
  for (char c : text) numeric = numeric && c >= '0' && c <= '9';
  return numeric;
}
}  // namespace

// 15000..32767: below Linux's ephemeral range (32768 and up), so no outgoing connection holds it.
constexpr int kBase = 15000;
constexpr std::uint64_t kPorts = 32768 - kBase;

std::string port_derivation(std::string_view job_id) {
  return is_numeric(job_id) ? "15000 + job id modulo 17768"
                            : "15000 + hash of the job id modulo 17768";
}

int port_from_job_id(std::string_view job_id) {
  if (is_numeric(job_id)) {
    // The whole id counts (not its last digits): jobs 1234 and 11234 get different ports, and
    // only ids 17768 apart share one.
    std::uint64_t id = 0;
    for (char c : job_id) id = (id * 10 + static_cast<std::uint64_t>(c - '0')) % kPorts;
    return kBase + static_cast<int>(id);
  }
  // FNV-1a: stable across processes and machines, unlike std::hash.
  std::uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : job_id) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return kBase + static_cast<int>(hash % kPorts);
}

}  // namespace ddp::launcher::scheduler
