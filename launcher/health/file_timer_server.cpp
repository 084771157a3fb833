// SPDX-License-Identifier: MIT
#include "launcher/health/file_timer_server.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/exit_codes.hpp"

namespace ddp::launcher::health {
namespace {
// FileTimerClient refuses requests over PIPE_BUF (4096); anything longer is not one of its lines.
constexpr size_t kMaxLine = 8192;
constexpr size_t kMaxBytesPerWakeup = size_t{64} * 1024;
constexpr auto kPauseAfterFullWakeup = std::chrono::milliseconds(5);
constexpr auto kBadLineReportInterval = std::chrono::seconds(10);
constexpr size_t kMaxTimers = 65536;

bool process_running(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }
}  // namespace

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

FileTimerServer::FileTimerServer(boost::asio::io_context& io, Handlers handlers)
    : read_end_(io),
      deadline_timer_(io),
      pause_timer_(io),
      report_timer_(io),
      handlers_(std::move(handlers)) {}

FileTimerServer::~FileTimerServer() { close(); }

Result<Ok> FileTimerServer::open(const std::string& path) {
  ::unlink(path.c_str());
  if (::mkfifo(path.c_str(), 0600) != 0) {
    return Error{exit_codes::kInternal,
                 fmt::format("cannot create the timer pipe '{}': {}", path, std::strerror(errno))};
  }
  int rfd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  int wfd = rfd < 0 ? -1 : ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (rfd < 0 || wfd < 0) {
    int err = errno;
    if (rfd >= 0) ::close(rfd);
    ::unlink(path.c_str());
    return Error{exit_codes::kInternal,
                 fmt::format("cannot open the timer pipe '{}': {}", path, std::strerror(err))};
  }
  read_end_.assign(rfd);
  write_end_ = wfd;
  path_ = path;
  arm_read();
  return Ok{};
}

void FileTimerServer::close() {
  boost::system::error_code ignored;
  deadline_timer_.cancel();
  pause_timer_.cancel();
  report_timer_.cancel();
  if (read_end_.is_open()) read_end_.close(ignored);
  if (write_end_ >= 0) {
    ::close(write_end_);
    write_end_ = -1;
  }
  if (!path_.empty()) {
    ::unlink(path_.c_str());
    path_.clear();
  }
}

void FileTimerServer::forget(pid_t pid) {
  table_.clear({pid}, [](pid_t) { return true; });
  schedule();
}

void FileTimerServer::forget_all() {
  table_ = TimerTable{};
  schedule();
}

void FileTimerServer::arm_read() {
  read_end_.async_wait(boost::asio::posix::descriptor_base::wait_read,
                       [this](const boost::system::error_code& ec) {
                         if (ec) return;
                         if (!read_lines()) return arm_read();
                         // A flood: the other handlers ran in between; now let time pass too.
                         pause_timer_.expires_after(kPauseAfterFullWakeup);
                         pause_timer_.async_wait([this](const boost::system::error_code& wait_ec) {
                           if (!wait_ec && read_end_.is_open()) arm_read();
                         });
                       });
}

bool FileTimerServer::read_lines() {
  char buffer[16384];
  const size_t timers_before = table_.size();
  bool changed = false;
  size_t total = 0;
  while (total < kMaxBytesPerWakeup) {
    ssize_t n = ::read(read_end_.native_handle(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN (we hold a writer, so never EOF)
    total += static_cast<size_t>(n);
    std::string_view chunk(buffer, static_cast<size_t>(n));
    while (!chunk.empty()) {
      size_t nl = chunk.find('\n');
      std::string_view piece = chunk.substr(0, nl);
      if (!discarding_) partial_.append(piece);
      if (partial_.size() > kMaxLine) {
        partial_.clear();
        discarding_ = true;
      }
      if (nl == std::string_view::npos) break;
      chunk.remove_prefix(nl + 1);
      if (discarding_) {
        discarding_ = false;
        bad_line("a line longer than 8192 bytes");
        continue;
      }
      if (!partial_.empty()) {
        changed = true;
        handle_line(partial_);
      }
      partial_.clear();
    }
  }
  if (changed || table_.size() != timers_before) schedule();
  return total >= kMaxBytesPerWakeup;
}

void FileTimerServer::handle_line(std::string_view line) {
  std::string why;
  auto request = parse_timer_request(line, &why);
  if (!request) return bad_line(std::move(why));
  if (table_.size() >= kMaxTimers && request->expiration_time >= 0) {
    return bad_line(fmt::format("more than {} timers at once", kMaxTimers));
  }
  table_.apply(*request);
  if (handlers_.on_request) handlers_.on_request(*request);
}

void FileTimerServer::bad_line(std::string why) {
  ++bad_lines_;
  last_bad_why_ = std::move(why);
  if (!report_due_) report_bad_lines();  // else the scheduled summary counts this one
}

void FileTimerServer::report_bad_lines() {
  const size_t count = std::exchange(bad_lines_, 0);
  if (handlers_.on_bad_lines) handlers_.on_bad_lines(count, last_bad_why_);
  // Whatever follows within the interval is summarised once at its end.
  report_due_ = true;
  report_timer_.expires_after(kBadLineReportInterval);
  report_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    report_due_ = false;
    if (bad_lines_ > 0) report_bad_lines();
  });
}

void FileTimerServer::schedule() {
  auto next = table_.next_deadline();
  if (!next) {
    deadline_timer_.cancel();
    return;
  }
  double wait_s = std::max(0.0, *next - epoch_seconds());
  // Far-future deadlines: wake up at most once an hour to re-check (clock changes).
  wait_s = std::min(wait_s, 3600.0);
  deadline_timer_.expires_after(
      std::chrono::microseconds(static_cast<long long>(wait_s * 1e6) + 1));
  deadline_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) check_expired();
  });
}

void FileTimerServer::check_expired() {
  table_.clear({}, process_running);  // as torch: timers of pids that are gone never fire
  auto expired = table_.expired(epoch_seconds());
  if (!expired.empty()) {
    std::vector<pid_t> handled;
    handled.reserve(expired.size());
    for (const auto& e : expired) handled.push_back(e.pid);
    table_.clear(handled, [](pid_t) { return true; });
    if (handlers_.on_expired) handlers_.on_expired(expired);
  }
  schedule();
}

}  // namespace ddp::launcher::health
