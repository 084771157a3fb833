// SPDX-License-Identifier: MIT
#include "launcher/health/timer_table.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

namespace ddp::launcher::health {

std::optional<TimerRequest> parse_timer_request(std::string_view line, std::string* error) {
  auto fail = [&](const char* why) -> std::optional<TimerRequest> {
    if (error) *error = why;
    return std::nullopt;
  };
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return fail("not a JSON object");
  auto pid = j.find("pid");
  auto scope = j.find("scope_id");
  auto expiration = j.find("expiration_time");
  auto sig = j.find("signal");
  if (pid == j.end() || !pid->is_number_integer()) return fail("no integer \"pid\"");
  if (scope == j.end() || !scope->is_string()) return fail("no string \"scope_id\"");
  if (expiration == j.end() || !expiration->is_number())
    return fail("no number \"expiration_time\"");
  if (sig == j.end() || !sig->is_number_integer()) return fail("no integer \"signal\"");
  long long p = pid->get<long long>();
  if (p <= 0 || p > std::numeric_limits<pid_t>::max()) return fail("\"pid\" out of range");
  TimerRequest r;
  r.pid = static_cast<pid_t>(p);
  r.scope = scope->get<std::string>();
  r.expiration_time = expiration->get<double>();
  long long s = sig->get<long long>();
  r.signal = s < 0 || s > 64 ? 0 : static_cast<int>(s);  // out of range: never a kill
  return r;
}

void TimerTable::apply(const TimerRequest& request) {
  auto key = std::make_pair(request.pid, request.scope);
  if (request.expiration_time < 0) {
    timers_.erase(key);
  } else {
    timers_[key] = request;
  }
}

std::vector<ExpiredTimer> TimerTable::expired(double now) const {
  std::map<pid_t, std::vector<const TimerRequest*>> by_pid;
  for (const auto& [key, t] : timers_) {
    if (t.expiration_time <= now) by_pid[t.pid].push_back(&t);
  }
  std::vector<ExpiredTimer> out;
  for (auto& [pid, list] : by_pid) {
    std::stable_sort(list.begin(), list.end(), [](const TimerRequest* a, const TimerRequest* b) {
      return a->expiration_time < b->expiration_time;
    });
    ExpiredTimer e;
    e.pid = pid;
    for (const TimerRequest* t : list) e.all_scopes.push_back(t->scope);
    e.scope = list.front()->scope;
    e.deadline = list.front()->expiration_time;
    for (const TimerRequest* t : list) {
      if (t->signal > 0) {
        e.scope = t->scope;
        e.deadline = t->expiration_time;
        e.signal = t->signal;
        break;
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

void TimerTable::clear(const std::vector<pid_t>& reaped,
                       const std::function<bool(pid_t)>& running) {
  std::erase_if(timers_, [&](const auto& entry) {
    pid_t pid = entry.first.first;
    return std::find(reaped.begin(), reaped.end(), pid) != reaped.end() || !running(pid);
  });
}

std::optional<double> TimerTable::next_deadline() const {
  std::optional<double> next;
  for (const auto& [key, t] : timers_) {
    if (!next || t.expiration_time < *next) next = t.expiration_time;
  }
  return next;
}

}  // namespace ddp::launcher::health
