// SPDX-License-Identifier: MIT
// `ddprun top`: the terminal's side only (arguments, the endpoint, the tty, the loop). What a
// frame shows is terminal_frame.cpp's; what /status means is status_model.cpp's.
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "common/exit_codes.hpp"
#include "launcher/common/terminal_text.hpp"
#include "launcher/health/status_beacon.hpp"
#include "launcher/output/output_sink.hpp"
#include "launcher/view/commands.hpp"
#include "launcher/view/http_get.hpp"
#include "launcher/view/subcommand.hpp"
#include "launcher/view/terminal_frame.hpp"

namespace ddp::launcher::view {

namespace {

constexpr auto kFetchTimeout = std::chrono::seconds(3);
/// No job to look at (none found, or it does not answer): sysexits' EX_UNAVAILABLE, as ddprun's
/// own "store unavailable"; 2 stays for a bad command line.
constexpr int kNoJob = exit_codes::kUnavailable;

/// Where the job answers: HOST:PORT (--status-port), or its Unix socket (a local job found by
/// its beacon without a TCP port; shown by ddprun's pid: the path may be long).
struct Endpoint {
  std::string host;
  int port = 0;
  std::string socket;
  pid_t pid = 0;
  std::string text() const {
    if (!socket.empty()) return fmt::format("pid {} (unix socket)", pid);
    return host.find(':') == std::string::npos ? fmt::format("{}:{}", host, port)
                                               : fmt::format("[{}]:{}", host, port);
  }
};

void fetch_status(boost::asio::io_context& io, const Endpoint& e,
                  std::function<void(Result<std::string>)> done) {
  if (!e.socket.empty())
    return async_http_get_local(io, e.socket, e.pid, "/status", kFetchTimeout, done);
  async_http_get(io, e.host, e.port, "/status", kFetchTimeout, std::move(done));
}

int top_fail(int code, const std::string& line) { return subcommand_fail("top", code, line); }

/// An ended job's exit code, for `top`'s own (0 when it succeeded; 1 when it failed without one).
int job_exit_code(const StatusModel& m) {
  if (m.state == "succeeded") return exit_codes::kSuccess;
  return m.exit_code && *m.exit_code > 0 && *m.exit_code < 256 ? *m.exit_code : 1;
}

/// HOST:PORT, [V6]:PORT, PORT (loopback), or a URL as the "status endpoint" line prints it.
std::optional<Endpoint> parse_endpoint(std::string s) {
  if (s.rfind("http://", 0) == 0) s = s.substr(7);
  if (auto slash = s.find('/'); slash != std::string::npos) s.resize(slash);
  Endpoint e{"127.0.0.1", 0};
  std::string port = s;
  if (!s.empty() && s[0] == '[') {
    auto close = s.find("]:");
    if (close == std::string::npos) return std::nullopt;
    e.host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else if (auto colon = s.rfind(':'); colon != std::string::npos) {
    e.host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  if (e.host.empty() || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  e.port = std::stoi(port);
  if (e.port < 1 || e.port > 65535) return std::nullopt;
  return e;
}

std::string current_dir() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
}

bool color_wanted() {
  const char* no_color = std::getenv("NO_COLOR");
  return ::isatty(STDOUT_FILENO) && !(no_color && *no_color);
}

std::pair<int, int> terminal_size() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    return {ws.ws_col, ws.ws_row};
  }
  auto env_int = [](const char* name, int fallback) {
    const char* v = std::getenv(name);
    int n = v ? std::atoi(v) : 0;
    return n > 0 ? n : fallback;
  };
  return {env_int("COLUMNS", 80), env_int("LINES", 24)};
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// Raw keys (no echo, no line buffering) while alive; the terminal's settings come back on every
/// way out: destruction (return, exception), the signals the loop handles, and a stop (Ctrl-Z:
/// leave() before, enter() again after `fg`).
class RawTerminal {
 public:
  RawTerminal() {
    have_saved_ = ::tcgetattr(STDIN_FILENO, &saved_) == 0;
    enter();
  }
  ~RawTerminal() { leave(); }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

  void enter() {
    if (have_saved_) {
      termios raw = saved_;
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
      raw.c_cc[VMIN] = 1;
      raw.c_cc[VTIME] = 0;
      ::tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    // The alternate screen, cursor hidden: the frame is redrawn in place.
    write_fully(STDOUT_FILENO, "\x1b[?1049h\x1b[?25l");
    active_ = true;
  }
  void leave() {
    if (!active_) return;
    write_fully(STDOUT_FILENO, "\x1b[?25h\x1b[?1049l");
    if (have_saved_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    active_ = false;
  }

 private:
  termios saved_{};
  bool have_saved_ = false;
  bool active_ = false;
};

class TopLoop {
 public:
  TopLoop(Endpoint endpoint, std::chrono::milliseconds interval)
      : endpoint_(std::move(endpoint)),
        interval_(interval),
        signals_(io_, SIGINT, SIGTERM, SIGHUP),
        resize_(io_, SIGWINCH),
        stop_signals_(io_, SIGTSTP, SIGCONT),
        keys_(io_, ::dup(STDIN_FILENO)),
        timer_(io_) {}

  int run() {
    RawTerminal raw;
    raw_ = &raw;
    signals_.async_wait([this](const boost::system::error_code& ec, int) {
      if (!ec) stop();
    });
    watch_resize();
    watch_stops();
    read_keys();
    fetch();
    io_.run();
    raw.leave();
    raw_ = nullptr;
    // The end stays readable in the shell once the alternate screen is gone.
    if (model_ && model_->ended()) {
      std::string line =
          fmt::format("ddprun top: job {} ended: {}, exit {}", model_->run_id, model_->state,
                      model_->exit_code ? std::to_string(*model_->exit_code) : "?");
      if (!model_->root_cause.empty()) line += ": " + model_->root_cause;
      write_fully(STDOUT_FILENO, visible_line(line) + "\n");
      return job_exit_code(*model_);
    }
    return exit_codes::kSuccess;
  }

 private:
  void stop() { io_.stop(); }
  /// Ctrl-Z: the terminal as it was (main screen, cursor, echo), then stop for real; after `fg`
  /// (SIGCONT) the full screen again. A SIGCONT alone (after a SIGSTOP from elsewhere) redraws.
  void watch_stops() {
    stop_signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGTSTP && raw_) {
        raw_->leave();
        ::kill(::getpid(), SIGSTOP);  // returns after SIGCONT
      }
      if (raw_) raw_->enter();
      draw();
      watch_stops();
    });
  }
  void watch_resize() {
    resize_.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      draw();
      watch_resize();
    });
  }
  void read_keys() {
    keys_.async_read_some(boost::asio::buffer(key_),
                          [this](const boost::system::error_code& ec, size_t n) {
                            if (ec) return;  // stdin closed: Ctrl-C still works
                            if (on_keys(std::string_view(key_, n))) return stop();
                            draw();
                            read_keys();
                          });
  }
  /// Applies the keys of one read; true to quit.
  bool on_keys(std::string_view keys) {
    const int page = std::max(1, terminal_size().second - 12);
    for (size_t i = 0; i < keys.size(); ++i) {
      const char k = keys[i];
      if (k == 'q' || k == 'Q' || k == 3 /* Ctrl-C */) return true;
      if (k == '\x1b' && i + 2 < keys.size() && keys[i + 1] == '[') {
        // Arrows and paging keys: ESC [ A, ESC [ B, ESC [ 5 ~, ESC [ 6 ~, ESC [ H.
        const char c = keys[i + 2];
        if (c == 'A') scroll_ = std::max(0, scroll_ - 1);
        if (c == 'B') ++scroll_;
        if (c == 'H') scroll_ = 0;
        if (c == '5') scroll_ = std::max(0, scroll_ - page);
        if (c == '6') scroll_ += page;
        i += (c == '5' || c == '6') ? 3 : 2;
        continue;
      }
      switch (k) {
        case 'k':
          scroll_ = std::max(0, scroll_ - 1);
          break;
        case 'j':
          ++scroll_;
          break;
        case '?':
        case 'h':
          help_ = !help_;
          break;
        case 's':
          sort_ = static_cast<RankSort>((static_cast<int>(sort_) + 1) % 4);
          scroll_ = 0;
          break;
        case 'f':
          filter_ = static_cast<RankFilter>((static_cast<int>(filter_) + 1) % 3);
          scroll_ = 0;
          break;
        case 'n':
          next_node();
          scroll_ = 0;
          break;
        default:
          break;
      }
    }
    if (model_) {  // no scrolling past the last rank
      scroll_ = std::min(scroll_, std::max(0, static_cast<int>(model_->ranks.size()) - 1));
    }
    return false;
  }
  void next_node() {
    std::vector<int> nodes;
    if (model_) {
      for (const auto& r : model_->ranks) nodes.push_back(r.node);
    }
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    if (nodes.empty()) return node_.reset();
    if (!node_) {
      node_ = nodes.front();
      return;
    }
    auto it = std::upper_bound(nodes.begin(), nodes.end(), *node_);
    if (it == nodes.end()) {
      node_.reset();
    } else {
      node_ = *it;
    }
  }
  void fetch() {
    fetch_status(io_, endpoint_, [this](Result<std::string> body) {
      if (body) {
        auto model = parse_status(*body);
        if (model) {
          model_ = std::move(*model);
          rates_.note(*model_, now_seconds());
          remember_failures(*model_);
          notice_.clear();
        } else {
          notice_ = model.error().message;
        }
      } else {
        notice_ = body.error().message + "; retrying";
      }
      if (model_ && model_->ended()) {
        // The final state: nothing more will come (the endpoint closes soon).
        notice_.clear();
        draw();
        return;
      }
      draw();
      timer_.expires_after(interval_);
      timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) fetch();
      });
    });
  }
  /// Failures stay listed across restarts and beyond the server's ring (bounded, by seq).
  void remember_failures(const StatusModel& m) {
    for (const auto& f : m.failures) {
      if (f.seq != 0 && f.seq <= last_failure_seq_) continue;
      failures_.push_back(f);
      if (f.seq != 0) last_failure_seq_ = f.seq;
      if (failures_.size() > 100) failures_.erase(failures_.begin());
    }
  }
  void draw() {
    if (!raw_) return;
    auto [w, h] = terminal_size();
    const std::string footer =
        fmt::format("{}q quits  ? help  s sort: {}  f filter: {}  n node: {}",
                    model_ && model_->ended() ? "the job ended; " : "", sort_name(sort_),
                    filter_name(filter_), node_ ? std::to_string(*node_) : std::string("all"));
    FrameOptions options{w, h, color_wanted(), endpoint_.text(), footer, notice_, failures_};
    options.sort = sort_;
    options.filter = filter_;
    options.node = node_;
    options.scroll = scroll_;
    options.help = help_;
    std::string out = "\x1b[H";
    const auto lines = render_frame(model_ ? *model_ : StatusModel{}, rates_, options);
    for (size_t i = 0; i < lines.size(); ++i) {
      out += lines[i];
      if (i + 1 < lines.size()) out += "\r\n";
    }
    write_fully(STDOUT_FILENO, out);
  }

  Endpoint endpoint_;
  std::chrono::milliseconds interval_;
  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
  boost::asio::signal_set resize_;
  boost::asio::signal_set stop_signals_;
  boost::asio::posix::stream_descriptor keys_;
  RawTerminal* raw_ = nullptr;
  RankSort sort_ = RankSort::Worst;
  RankFilter filter_ = RankFilter::All;
  std::optional<int> node_;
  int scroll_ = 0;
  bool help_ = false;
  std::vector<EventLine> failures_;
  long long last_failure_seq_ = 0;
  boost::asio::steady_timer timer_;
  char key_[64] = {};
  std::optional<StatusModel> model_;
  RateHistory rates_;
  std::string notice_;
};

int print_once(const Endpoint& endpoint) {
  boost::asio::io_context io;
  Result<std::string> body = Error{kNoJob, "no answer"};
  fetch_status(io, endpoint, [&](Result<std::string> r) { body = std::move(r); });
  io.run();
  if (!body) return top_fail(body.error().exit_code, body.error().message);
  auto model = parse_status(*body);
  if (!model) return top_fail(model.error().exit_code, model.error().message);
  auto [w, h] = terminal_size();
  RateHistory rates;
  rates.note(*model, now_seconds());
  auto lines = render_frame(*model, rates, {w, h, color_wanted(), endpoint.text(), "--once", ""});
  // One frame for a script: no padding lines at the end.
  while (lines.size() > 1 && lines[lines.size() - 2].find_first_not_of(' ') == std::string::npos) {
    lines.erase(lines.end() - 2);
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  write_fully(STDOUT_FILENO, out);
  return model->ended() ? job_exit_code(*model) : exit_codes::kSuccess;
}

}  // namespace

int run_top(const std::vector<std::string>& args) {
  CLI::App app{"ddprun top: a running job's ranks in the terminal, worst first", "ddprun top"};
  std::string where;
  bool once = false;
  double interval = 1.0;
  app.add_option(
      "endpoint", where,
      "HOST:PORT of the job's --status-port; omitted: this user's local job, found by its beacon "
      "(exit 69 when there is none)");
  app.add_flag("--once", once, "print one frame and exit");
  app.add_option("--interval", interval, "seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0));
  if (auto done = parse_subcommand(app, "top", args)) return *done;
  std::optional<Endpoint> endpoint;
  if (!where.empty()) {
    endpoint = parse_endpoint(where);
    if (!endpoint) return top_fail(exit_codes::kUsage, fmt::format("'{}' is not HOST:PORT", where));
  } else {
    std::string refused;
    const std::string dir = health::status_beacon_dir(&refused);
    auto found = health::find_status_beacon(dir, current_dir());
    if (!found) {  // nothing to look at: unavailable (69) as when the job does not answer
      return top_fail(kNoJob, fmt::format("no running ddprun found for this user{}; for a job on "
                                          "another machine pass HOST:PORT (its --status-port)",
                                          dir.empty() ? ": " + refused : " in " + dir));
    }
    if (found->port > 0) {
      std::string host = found->address;
      if (host == "0.0.0.0") host = "127.0.0.1";
      if (host == "::") host = "::1";
      endpoint = Endpoint{host, found->port, {}, found->pid};
    } else {  // started without --status-port: its Unix socket
      endpoint = Endpoint{{}, 0, found->socket, found->pid};
    }
  }
  if (once) return print_once(*endpoint);
  if (!::isatty(STDIN_FILENO) || !::isatty(STDOUT_FILENO)) {
    return top_fail(exit_codes::kUsage, "needs a terminal (use --once for one frame)");
  }
  return TopLoop(*endpoint, std::chrono::milliseconds(static_cast<long long>(interval * 1000)))
      .run();
}

}  // namespace ddp::launcher::view
