// SPDX-License-Identifier: MIT
#include "launcher/common/value_parsers.hpp"

#include <fmt/format.h>
#include <cctype>
#include <charconv>
#include <cmath>
#include <vector>

#include "launcher/common/usage_error.hpp"

namespace ddp::launcher {
namespace {

std::optional<long long> to_integer(std::string_view text) {
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc{} || ptr != end) return std::nullopt;
  return value;
}

/// Splits on `sep`, keeping empty pieces so that "0,,1" is reported as malformed.
std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    parts.push_back(text.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_python_identifier(const std::string& part) {
  if (part.empty() || std::isdigit(static_cast<unsigned char>(part[0]))) return false;
  for (char ch : part) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return false;
  }
  return true;
}

bool is_python_module_name(const std::string& name) {
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    if (!is_python_identifier(name.substr(start, dot == std::string::npos ? dot : dot - start)))
      return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

}  // namespace

Result<NodeRange> parse_node_range(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return usage_error(
        fmt::format("--nnodes: '{}' {} (expected N or MIN:MAX with 0 < MIN <= MAX)", text, why));
  };
  auto colon = text.find(':');
  std::optional<long long> lo, hi;
  if (colon == std::string_view::npos) {
    lo = hi = to_integer(text);
  } else {
    lo = to_integer(text.substr(0, colon));
    hi = to_integer(text.substr(colon + 1));
  }
  if (!lo || !hi) return bad("is not a number or range");
  if (*lo <= 0) return bad("must be at least 1");
  if (*lo > *hi) return bad("has MIN > MAX");
  if (*hi > 1'000'000) return bad("is too large");
  return NodeRange{static_cast<int>(*lo), static_cast<int>(*hi)};
}

Result<long long> parse_integer(std::string_view flag, std::string_view text, long long lo,
                                long long hi) {
  auto value = to_integer(trim(text));
  if (!value) return usage_error(fmt::format("{}: '{}' is not a whole number", flag, text));
  if (*value < lo || *value > hi) {
    return usage_error(fmt::format("{}: {} is out of range ({}..{})", flag, *value, lo, hi));
  }
  return *value;
}

Result<double> parse_seconds(std::string_view flag, std::string_view text) {
  std::string copy(trim(text));
  char* end = nullptr;
  double value = copy.empty() ? NAN : std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(value) || value < 0) {
    return usage_error(fmt::format("{}: '{}' is not a non-negative number of seconds", flag, text));
  }
  // Past this, milliseconds and steady_clock deadlines overflow (a negative wait spins a core).
  if (value > kMaxSeconds) {
    return usage_error(fmt::format("{}: '{}' is more than a year of seconds", flag, text));
  }
  return value;
}

StreamSet StreamSpec::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? StreamSet::None : it->second;
}

Result<StreamSpec> parse_stream_spec(std::string_view flag, std::string_view text) {
  auto bad = [&] {
    return usage_error(
        fmt::format("{}: '{}' is malformed (expected 0-3, or LOCAL_RANK:0-3 pairs such as 0:1,1:2)",
                    flag, text));
  };
  auto stream_set = [](std::string_view v) -> std::optional<StreamSet> {
    auto n = to_integer(v);
    if (!n || *n < 0 || *n > 3) return std::nullopt;
    return static_cast<StreamSet>(*n);
  };
  StreamSpec spec;
  text = trim(text);
  if (text.find(':') == std::string_view::npos) {
    auto all = stream_set(text);
    if (!all) return bad();
    spec.all = *all;
    return spec;
  }
  for (auto item : split(text, ',')) {
    auto parts = split(trim(item), ':');
    if (parts.size() != 2) return bad();
    auto rank = to_integer(parts[0]);
    auto set = stream_set(parts[1]);
    if (!rank || *rank < 0 || !set || spec.per_rank.count(static_cast<int>(*rank))) return bad();
    spec.per_rank[static_cast<int>(*rank)] = *set;
  }
  return spec;
}

Result<std::optional<std::set<int>>> parse_ranks_filter(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::optional<std::set<int>>{};
  std::set<int> ranks;
  for (auto item : split(text, ',')) {
    auto rank = to_integer(trim(item));
    if (!rank || *rank < 0 || *rank > 1'000'000) {
      return usage_error(fmt::format(
          "--local_ranks_filter: '{}' is malformed (expected local ranks such as 0,3)", text));
    }
    ranks.insert(static_cast<int>(*rank));
  }
  return std::optional<std::set<int>>{std::move(ranks)};
}

Result<std::map<std::string, std::string>> parse_key_values(std::string_view flag,
                                                            std::string_view text) {
  std::map<std::string, std::string> out;
  if (trim(text).empty()) return out;
  for (auto item : split(text, ',')) {
    auto eq = item.find('=');
    auto key = trim(item.substr(0, eq));
    if (eq == std::string_view::npos || key.empty()) {
      return usage_error(fmt::format(
          "{}: '{}' is malformed (expected key=value pairs joined by ',')", flag, item));
    }
    out[std::string(key)] = std::string(trim(item.substr(eq + 1)));
  }
  return out;
}

Result<HostPort> parse_host_port(std::string_view flag, std::string_view text) {
  HostPort hp;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {  // [v6]:port
    auto close = text.find(']');
    if (close == std::string_view::npos)
      return usage_error(fmt::format("{}: '{}' is malformed", flag, text));
    hp.host = std::string(text.substr(1, close - 1));
    auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return usage_error(fmt::format("{}: '{}' is malformed", flag, text));
      port_text = rest.substr(1);
    }
  } else {
    auto colon = text.rfind(':');
    bool one_colon = colon != std::string_view::npos && text.find(':') == colon;
    hp.host = std::string(one_colon ? text.substr(0, colon) : text);
    if (one_colon) port_text = text.substr(colon + 1);
  }
  if (!port_text.empty()) {
    auto port = parse_integer(flag, port_text, 0, 65535);
    if (!port) return port.error();
    hp.port = static_cast<int>(*port);
  }
  return hp;
}

Result<std::vector<std::string>> parse_preload_modules(const std::string& list) {
  std::vector<std::string> modules;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string name = list.substr(start, comma == std::string::npos ? comma : comma - start);
    if (!is_python_module_name(name)) {
      return usage_error(
          fmt::format("--preload: '{}' is not a module name (expected a comma list such "
                      "as torch,numpy)",
                      name));
    }
    modules.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return modules;
}

}  // namespace ddp::launcher
