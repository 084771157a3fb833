// SPDX-License-Identifier: MIT
#include "launcher/view/terminal_frame.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iterator>

#include "launcher/common/terminal_text.hpp"

namespace ddp::launcher::view {

namespace {

constexpr const char* kReset = "\x1b[0m";
constexpr const char* kInverse = "\x1b[7m";
constexpr const char* kRed = "\x1b[31;1m";
constexpr const char* kYellow = "\x1b[33;1m";
constexpr const char* kMagenta = "\x1b[35m";
constexpr const char* kDim = "\x1b[2m";
constexpr const char* kGreen = "\x1b[32;1m";

std::string clock_time(double t) {
  std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  ::localtime_r(&s, &tm);
  return fmt::format("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string optional_number(const std::optional<double>& v, const char* spec) {
  return v ? fmt::format(fmt::runtime(spec), *v) : "-";
}

}  // namespace

std::string fit(const std::string& text, int width) { return fit_columns(text, width); }

std::string cpu_text(const std::optional<double>& percent) {
  if (!percent || !(*percent >= 0)) return "-";
  if (*percent >= 999.5) return "999+";
  return fmt::format("{:.0f}%", *percent);
}

std::string memory_text(const std::optional<long long>& bytes) {
  if (!bytes || *bytes < 0) return "-";
  static constexpr const char* kUnits[] = {"B", "K", "M", "G", "T", "P"};
  double v = static_cast<double>(*bytes);
  size_t unit = 0;
  while (v >= 999.5 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  if (v >= 999.5) return "999+";
  return unit > 0 && v < 9.95 ? fmt::format("{:.1f}{}", v, kUnits[unit])
                              : fmt::format("{:.0f}{}", v, kUnits[unit]);
}

std::string sparkline(const std::vector<double>& values, int width) {
  static constexpr const char* kBlocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  std::string out;
  if (width <= 0) return out;
  const size_t n = std::min(values.size(), static_cast<size_t>(width));
  const double max = values.empty() ? 0 : *std::max_element(values.end() - n, values.end());
  for (size_t i = values.size() - n; i < values.size(); ++i) {
    const int level = max > 0 ? static_cast<int>(std::lround(values[i] / max * 7.0)) : 0;
    out += kBlocks[std::clamp(level, 0, 7)];
  }
  return out;
}

const char* sort_name(RankSort sort) {
  switch (sort) {
    case RankSort::Worst:
      return "worst first";
    case RankSort::Rank:
      return "rank";
    case RankSort::Step:
      return "step (lowest first)";
    case RankSort::Rate:
      return "steps/s (slowest first)";
  }
  return "?";
}

const char* filter_name(RankFilter filter) {
  switch (filter) {
    case RankFilter::All:
      return "all";
    case RankFilter::Trouble:
      return "failed, stalled or slow";
    case RankFilter::Running:
      return "running";
  }
  return "?";
}

std::vector<RankStatus> rank_rows(const StatusModel& m, const RateHistory& rates,
                                  const FrameOptions& o) {
  auto rows = worst_first(m.ranks, rates, m.hang_timeout_s);
  std::erase_if(rows, [&](const RankStatus& r) {
    if (o.node && r.node != *o.node) return true;
    const int sev = severity(r, m.hang_timeout_s);
    if (o.filter == RankFilter::Trouble) return sev < 2;
    if (o.filter == RankFilter::Running) return r.state != "running";
    return false;
  });
  auto by_rank = [](const RankStatus& a, const RankStatus& b) {
    return a.node != b.node ? a.node < b.node : a.rank < b.rank;
  };
  if (o.sort == RankSort::Rank) std::stable_sort(rows.begin(), rows.end(), by_rank);
  if (o.sort == RankSort::Step) {
    std::stable_sort(rows.begin(), rows.end(), [](const RankStatus& a, const RankStatus& b) {
      return a.step.value_or(-1) < b.step.value_or(-1);
    });
  }
  if (o.sort == RankSort::Rate) {
    std::stable_sort(rows.begin(), rows.end(), [&](const RankStatus& a, const RankStatus& b) {
      return rates.rate(a.node, a.rank).value_or(-1) < rates.rate(b.node, b.rank).value_or(-1);
    });
  }
  return rows;
}

namespace {

/// One frame's drawing state: the size, the colour choice and the lines drawn so far.
struct Frame {
  const StatusModel& m;
  const RateHistory& rates;
  const FrameOptions& o;
  int width;
  int height;
  std::string paint(const char* code, const std::string& line) const {
    return o.color ? std::string(code) + line + kReset : line;
  }
};

/// The title, the nodes, the notices, the end, the failures kept across restarts.
std::vector<std::string> head_lines(const Frame& f) {
  const StatusModel& m = f.m;
  const int width = f.width;
  std::vector<std::string> head;
  head.push_back(
      f.paint(kInverse, fit(fmt::format(" ddprun top  job {}  {}  attempt {}  world size {}  "
                                        "node {} of {}  {}",
                                        m.run_id.empty() ? "-" : m.run_id, m.state, m.attempt,
                                        m.world_size, m.node_rank, m.num_nodes, m.host),
                            width)));
  std::string nodes = " nodes:";
  if (m.nodes.empty())
    nodes += " " + (m.host.empty() ? std::string("this node") : m.host) + " (single node)";
  for (const auto& n : m.nodes) {
    nodes += n.node_rank ? fmt::format("  {} {} {}", *n.node_rank, n.name, n.state)
                         : fmt::format("  {} {}", n.name, n.state);
  }
  const bool node_trouble = std::any_of(m.nodes.begin(), m.nodes.end(), [](const NodeStatus& n) {
    return n.state == "lost" || n.state == "excluded";
  });
  head.push_back(f.paint(node_trouble ? kRed : "", fit(nodes, width)));
  if (m.node_rank != 0 && m.num_nodes > 1 && !m.job_wide) {
    head.push_back(fit(" this node's ranks only: node 0's endpoint shows every node", width));
  }
  if (!f.o.notice.empty()) head.push_back(f.paint(kYellow, fit(" " + f.o.notice, width)));
  if (m.ended()) {
    const bool ok = m.state == "succeeded";
    std::string end = fmt::format(" the job ended: {}, exit {}", m.state,
                                  m.exit_code ? std::to_string(*m.exit_code) : "?");
    if (!m.root_cause.empty()) end += ": " + m.root_cause;
    head.push_back(f.paint(ok ? kGreen : kRed, fit(end, width)));
  }
  // Failures stay on screen across restarts (the ranks they name are gone by then).
  const auto& failures = f.o.failures.empty() ? m.failures : f.o.failures;
  const int failures_room = std::min<int>(3, static_cast<int>(failures.size()));
  if (failures_room > 0) {
    head.push_back(f.paint(kRed, fit(fmt::format(" failures seen: {}{}", failures.size(),
                                                 failures.size() > 3 ? " (the last 3)" : ""),
                                     width)));
    for (size_t i = failures.size() - static_cast<size_t>(failures_room); i < failures.size();
         ++i) {
      const auto& e = failures[i];
      head.push_back(f.paint(
          kRed, fit(fmt::format("   {} {:<12} {}", clock_time(e.time), e.kind, e.text), width)));
    }
  }
  return head;
}

/// The other columns take 79 characters: the rate's sparkline gets what is left (none at 80).
int spark_width_of(int width) {
  return std::clamp(width - 80, 0, 40) >= 6 ? std::clamp(width - 80, 0, 40) : 0;
}

std::string spark_column(int spark_width, const std::string& text) {
  return spark_width > 0 ? " " + fit(text, spark_width) : std::string();
}

std::string columns_line(const Frame& f) {
  const std::string columns =
      fmt::format(" {:>4} {:>5} {:>3} {:>7} {:<8} {:>8} {:>7} {:>4} {:>4}{} {:>6} {:<5} {:>6}",
                  "NODE", "RANK", "LOC", "PID", "STATE", "STEP", "STEP/S", "CPU", "MEM",
                  spark_column(spark_width_of(f.width), "RATE"), "AGE", "FLAG", "EXIT");
  return f.paint(kDim, fit(columns, f.width));
}

std::string rank_line(const Frame& f, const RankStatus& r) {
  const int spark_width = spark_width_of(f.width);
  const int sev = severity(r, f.m.hang_timeout_s);
  const std::string state = sev == 4 ? "failed" : r.stopped ? "stopped" : r.state;
  const std::string flag = sev == 3 ? "STALL" : r.straggler ? "SLOW" : "";
  const std::string row = fmt::format(
      " {:>4} {:>5} {:>3} {:>7} {:<8} {:>8} {:>7} {:>4} {:>4}{} {:>6} {:<5} {:>6}", r.node, r.rank,
      r.local_rank, r.pid, fit(state, 8), r.step ? std::to_string(*r.step) : "-",
      optional_number(f.rates.rate(r.node, r.rank), "{:.2f}"), cpu_text(r.cpu_percent),
      memory_text(r.rss_bytes),
      spark_column(
          spark_width,
          sparkline(f.rates.recent(r.node, r.rank, static_cast<size_t>(spark_width)), spark_width)),
      optional_number(r.age_s, "{:.1f}s"), flag, r.exit.empty() ? "" : r.exit);
  return f.paint(sev == 4   ? kRed
                 : sev == 3 ? kYellow
                 : sev == 2 ? kMagenta
                            : "",
                 fit(row, f.width));
}

/// The ranks that fit in `rank_room` lines (scrolled), and the "more" line when not all fit.
void add_rank_lines(const Frame& f, int rank_room, std::vector<std::string>& lines) {
  const FrameOptions& o = f.o;
  const auto ordered = rank_rows(f.m, f.rates, o);
  const bool all_fit = static_cast<int>(ordered.size()) <= rank_room;
  if (!all_fit) rank_room = std::max(1, rank_room - 1);  // the "more" line
  const int total = static_cast<int>(ordered.size());
  const int first = std::clamp(o.scroll, 0, std::max(0, total - rank_room));
  if (total == 0 && !f.m.ranks.empty()) {
    lines.push_back(fit(fmt::format(" no rank matches (filter: {}{})", filter_name(o.filter),
                                    o.node ? fmt::format(", node {}", *o.node) : ""),
                        f.width));
  }
  for (int i = first; i < first + rank_room && i < total; ++i)
    lines.push_back(rank_line(f, ordered[static_cast<size_t>(i)]));
  if (!all_fit) {
    const int below = std::max(0, total - first - rank_room);
    lines.push_back(
        fit(o.sort == RankSort::Worst && first == 0 && o.filter == RankFilter::All && !o.node
                ? fmt::format(" ... {} more rank(s), none worse than those above (arrows scroll)",
                              below)
                : fmt::format(" ... {} above, {} below (arrows scroll)", first, below),
            f.width));
  }
}

void add_help_lines(const Frame& f, std::vector<std::string>& lines) {
  static const char* kHelp[] = {
      " keys",
      "   q          quit",
      "   ?          this help (again: the events)",
      "   s          sort: worst first, rank, step, steps/s",
      "   f          filter: all, failed/stalled/slow, running",
      "   n          node: all, then each node in turn",
      "   up/down k/j scroll one rank; PgUp/PgDn a page; Home the top",
      "   Ctrl-Z     suspend (the terminal comes back as it was; fg resumes)",
  };
  for (const char* h : kHelp) {
    if (static_cast<int>(lines.size()) >= f.height - 1) break;
    lines.push_back(f.paint(kDim, fit(h, f.width)));
  }
}

/// The recent events: at least `events_min` of them, every line the ranks left free.
void add_event_lines(const Frame& f, int events_min, std::vector<std::string>& lines) {
  const auto& events = f.m.events;
  const int free_lines = f.height - 1 - static_cast<int>(lines.size()) - 1;
  const int events_room =
      f.o.help ? 0 : std::min(static_cast<int>(events.size()), std::max(events_min, free_lines));
  if (events_room <= 0) return;
  lines.push_back(f.paint(kDim, fit(" recent events", f.width)));
  for (size_t i = events.size() - static_cast<size_t>(events_room); i < events.size(); ++i) {
    const auto& e = events[i];
    lines.push_back(fit(fmt::format(" {} {:<12} {}", clock_time(e.time), e.kind, e.text), f.width));
  }
}

}  // namespace

std::vector<std::string> render_frame(const StatusModel& m, const RateHistory& rates,
                                      const FrameOptions& o) {
  const Frame f{m, rates, o, std::max(o.width, 40), std::max(o.height, 8)};
  std::vector<std::string> lines = head_lines(f);
  lines.push_back(columns_line(f));
  // Room: the header, the ranks, then the events (at least 6 of them when there are; every line
  // the ranks leave free), then the footer.
  const int events_min = std::min<int>(6, static_cast<int>(m.events.size()));
  const int fixed = static_cast<int>(lines.size()) + 1 + (events_min > 0 ? events_min + 1 : 0);
  add_rank_lines(f, std::max(1, f.height - fixed), lines);
  if (o.help) add_help_lines(f, lines);
  add_event_lines(f, events_min, lines);
  while (static_cast<int>(lines.size()) < f.height - 1) lines.push_back(fit("", f.width));
  if (static_cast<int>(lines.size()) > f.height - 1)
    lines.resize(static_cast<size_t>(f.height - 1));
  lines.push_back(f.paint(kDim, fit(fmt::format(" {}  {}", o.source, o.footer), f.width)));
  return lines;
}

}  // namespace ddp::launcher::view
