#include "launcher/scheduler/hostlist.hpp"

#include <fmt/format.h>

#include "launcher/scheduler/env_values.hpp"
#include "launcher/scheduler/scheduler_types.hpp"

namespace ddp::launcher::scheduler {
namespace {

[[noreturn]] void fail(std::string_view list, std::string_view why) {
  throw SchedulerError(fmt::format("cannot parse Slurm host list '{}': {}", list, why));
}

bool is_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Splits on commas that are not inside brackets.
std::vector<std::string_view> split_top_level(std::string_view list) {
  std::vector<std::string_view> items;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    if (c == '[') {
      if (++depth > 1) fail(list, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) fail(list, "']' without '['");
    } else if (c == ',' && depth == 0) {
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) fail(list, "'[' without ']'");
  items.push_back(list.substr(start));
  return items;
}

// "01-04,10" -> {"01","02","03","04","10"}.
std::vector<std::string> expand_ranges(std::string_view list, std::string_view body) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= body.size()) {
    std::size_t comma = body.find(',', start);
    std::string_view range = body.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    std::size_t dash = range.find('-');
    std::string_view lo = range.substr(0, dash);
    std::string_view hi = dash == std::string_view::npos ? lo : range.substr(dash + 1);
    if (!is_digits(lo) || !is_digits(hi) || lo.size() > 9 || hi.size() > 9) {
      fail(list, fmt::format("bad range '{}' in brackets", range));
    }
    int first = parse_count(lo, "range start");
    int last = parse_count(hi, "range end");
    if (last < first) fail(list, fmt::format("descending range '{}'", range));
    if (out.size() + static_cast<std::size_t>(last - first) + 1 > kMaxHosts) {
      fail(list, fmt::format("expands to more than {} names", kMaxHosts));
    }
    for (int n = first; n <= last; ++n) {
      out.push_back(fmt::format("{:0{}}", n, lo.size()));
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

// One host expression, possibly with several bracket groups: a cartesian product, last fastest.
void expand_item(std::string_view list, std::string_view item, std::vector<std::string>& out) {
  if (item.empty()) fail(list, "empty host name");
  std::vector<std::string> names{""};
  std::size_t pos = 0;
  while (pos < item.size()) {
    std::size_t open = item.find('[', pos);
    std::string_view literal = item.substr(pos, open == std::string_view::npos ? open : open - pos);
    for (auto& name : names) name += literal;
    if (open == std::string_view::npos) break;
    std::size_t close = item.find(']', open);  // balanced: checked by split_top_level
    std::string_view body = item.substr(open + 1, close - open - 1);
    if (body.empty()) fail(list, "empty brackets");
    auto suffixes = expand_ranges(list, body);
    if (names.size() * suffixes.size() > kMaxHosts) {
      fail(list, fmt::format("expands to more than {} names", kMaxHosts));
    }
    std::vector<std::string> next;
    next.reserve(names.size() * suffixes.size());
    for (const auto& name : names) {
      for (const auto& suffix : suffixes) next.push_back(name + suffix);
    }
    names = std::move(next);
    pos = close + 1;
  }
  for (auto& name : names) {
    if (out.size() >= kMaxHosts)
      fail(list, fmt::format("expands to more than {} names", kMaxHosts));
    out.push_back(std::move(name));
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view list) {
  if (list.empty()) fail(list, "the list is empty");
  for (char c : list) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') fail(list, "white space in the list");
  }
  std::vector<std::string> hosts;
  for (std::string_view item : split_top_level(list)) expand_item(list, item, hosts);
  return hosts;
}

std::string first_host(std::string_view list) { return expand_hostlist(list).front(); }

}  // namespace ddp::launcher::scheduler
