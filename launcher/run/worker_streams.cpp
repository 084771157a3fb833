// SPDX-License-Identifier: MIT
#include "launcher/run/worker_streams.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "launcher/common/exit_codes.hpp"

namespace ddp::launcher {
namespace {

constexpr int kPipeBytes = 1 << 20;

std::string rank_prefix(int rank, bool color) {
  if (!color) return fmt::format("[rank{}]:", rank);
  static constexpr int kColors[] = {32, 34, 35, 36, 33, 31};
  return fmt::format("\x1b[{}m[rank{}]:\x1b[0m", kColors[rank % 6], rank);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Result<WorkerStreams> WorkerStreams::open(boost::asio::io_context& io, const LaunchConfig& c, int r,
                                          const std::string& dir, OutputSink& stdout_sink, OutputSink& stderr_sink,
                                          const FileError& on_file_error) {
  const bool filtered = c.console_ranks && !c.console_ranks->count(r);
  const StreamSet redirect = c.redirects.for_rank(r);
  const StreamSet tee = c.tee.for_rank(r);
  WorkerStreams streams;
  for (int s = 0; s < 2; ++s) {
    bool (*includes)(StreamSet) = s == 0 ? includes_stdout : includes_stderr;
    const bool to_file = includes(redirect) || includes(tee) || filtered;
    // As in torchrun, --tee wins over --redirects for the same stream.
    const bool to_console = (!includes(redirect) || includes(tee)) && !filtered;
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {  // out of descriptors, most likely
      return Error{exit_codes::kInternal, fmt::format("pipe: {}", std::strerror(errno))};
    }
    streams.read_fd_[s] = pipe_fds[0];
    streams.write_fd_[s] = pipe_fds[1];
    ::fcntl(pipe_fds[1], F_SETPIPE_SZ, kPipeBytes);  // fewer wake-ups; best effort
    StreamRoute& route = streams.route_[s];
    OutputSink* console = s == 0 ? &stdout_sink : &stderr_sink;
    route.console = to_console ? console : nullptr;
    route.fallback_console = console;
    route.keep_tail = s == 1;
    if (to_file) {
      route.file_path = dir + (s == 0 ? "/stdout.log" : "/stderr.log");
      int fd = ::open(route.file_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) {
        on_file_error(route.file_path, errno);
        route.console = console;  // nothing lost
      } else {
        route.file = std::make_shared<OutputSink>(io, fd, /*owns_fd=*/true);
      }
      route.on_file_error = on_file_error;
    }
  }
  return streams;
}

WorkerStreams::WorkerStreams(WorkerStreams&& other) noexcept {
  for (int s = 0; s < 2; ++s) {
    write_fd_[s] = std::exchange(other.write_fd_[s], -1);
    read_fd_[s] = std::exchange(other.read_fd_[s], -1);
    route_[s] = std::exchange(other.route_[s], StreamRoute{});
  }
}

WorkerStreams::~WorkerStreams() {
  for (int s = 0; s < 2; ++s) {
    close_fd(write_fd_[s]);
    close_fd(read_fd_[s]);
  }
}

WorkerStreams::Pumps WorkerStreams::start(boost::asio::io_context& io, int rank) {
  Pumps pumps;
  for (int s = 0; s < 2; ++s) {
    close_fd(write_fd_[s]);
    const OutputSink* sink = route_[s].console;
    // The pump owns the read end and the log file from here on.
    auto pump = std::make_shared<StreamPump>(io, std::exchange(read_fd_[s], -1),
                                             std::exchange(route_[s], StreamRoute{}),
                                             rank_prefix(rank, sink && sink->is_tty()));
    pump->start();
    (s == 0 ? pumps.out : pumps.err) = std::move(pump);
  }
  return pumps;
}

}  // namespace ddp::launcher
