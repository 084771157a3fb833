// SPDX-License-Identifier: MIT
#include "launcher/run/worker_streams.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/exit_codes.hpp"

namespace ddp::launcher {
namespace {

constexpr int kWorkerPipeBytes = 1 << 20;

std::shared_ptr<OutputSink> open_sink(boost::asio::io_context& io, const std::string& path,
                                      bool append, const WorkerStreams::FileError& on_file_error) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | (append ? 0 : O_TRUNC) | O_APPEND | O_CLOEXEC,
                  0644);
  if (fd < 0) {
    on_file_error(path, errno);
    return nullptr;
  }
  return std::make_shared<OutputSink>(io, fd, /*owns_fd=*/true);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Result<WorkerStreams> WorkerStreams::open(boost::asio::io_context& io, const LaunchConfig& c, int r,
                                          const std::string& dir, const std::string& attempt_dir,
                                          OutputSink& stdout_sink, OutputSink& stderr_sink,
                                          const FileError& on_file_error) {
  const bool filtered = c.console_ranks && !c.console_ranks->count(r);
  const StreamSet redirect = c.redirects.for_rank(r);
  const StreamSet tee = c.tee.for_rank(r);
  WorkerStreams streams;
  streams.notices_ = &stderr_sink;
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
    ::fcntl(pipe_fds[1], F_SETPIPE_SZ, kWorkerPipeBytes);  // fewer wake-ups; best effort
    StreamRoute& route = streams.route_[s];
    // With --events on stdout, stdout carries only events: worker stdout goes to stderr.
    OutputSink* console = s == 0 && !c.events_on_stdout() ? &stdout_sink : &stderr_sink;
    route.console = to_console ? console : nullptr;
    route.fallback_console = console;
    route.keep_tail = true;  // stderr: the failure summary; both: GET /log/<rank>[/stdout]
    if (to_file) {
      route.file_path = dir + (s == 0 ? "/stdout.log" : "/stderr.log");
      route.file = open_sink(io, route.file_path, /*append=*/false, on_file_error);
      if (!route.file) route.console = console;  // nothing lost
      route.on_file_error = on_file_error;
    }
    const auto& needles = s == 0 ? c.duplicate_stdout_filters : c.duplicate_stderr_filters;
    if (!needles.empty() && includes(tee)) {  // torchrun: only --tee'd streams are duplicated
      route.duplicate.file =
          open_sink(io, attempt_dir + (s == 0 ? "/filtered_stdout.log" : "/filtered_stderr.log"),
                    /*append=*/true, on_file_error);
      route.duplicate.needles = needles;
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
  notices_ = other.notices_;
}

WorkerStreams::~WorkerStreams() {
  for (int s = 0; s < 2; ++s) {
    close_fd(write_fd_[s]);
    close_fd(read_fd_[s]);
  }
}

void WorkerStreams::on_line(const std::function<void()>& hook) {
  for (auto& route : route_) route.on_line = hook;
}

WorkerStreams::Pumps WorkerStreams::start(boost::asio::io_context& io, const LinePrefixStyle& style,
                                          ColorMode color_mode, const PrefixFields& fields,
                                          const std::optional<std::string>& no_color_env) {
  Pumps pumps;
  for (int s = 0; s < 2; ++s) {
    close_fd(write_fd_[s]);
    const OutputSink* sink = route_[s].console;
    if (route_[s].duplicate.file) {
      route_[s].duplicate.prefix =
          style.tmpl ? substitute_template(*style.tmpl, fields)
                     : fmt::format("[{}{}]:", fields.role_name, fields.local_rank);
    }
    const bool color = sink && use_color(color_mode, sink->is_tty(), no_color_env);
    if (sink && notices_) {
      route_[s].on_first_cut = [notices = notices_, rank = fields.rank, s] {
        notices->write_all(fmt::format(
            "ddprun: rank {}: a {} line longer than 1 MiB kept the other ranks' lines waiting "
            "{} s without a newline and was cut there on the console; until its next newline, "
            "its long lines are cut as soon as another rank's line waits (its log file, with "
            "--tee or --redirects, has it whole)\n",
            rank, s == 0 ? "stdout" : "stderr", StreamPump::kLongLineHold.count()));
      };
    }
    // The pump owns the read end and the log file from here on.
    auto pump = std::make_shared<StreamPump>(
        io, std::exchange(read_fd_[s], -1), std::exchange(route_[s], StreamRoute{}),
        console_line_prefix(style, fields, color), console_line_prefix(style, fields, false));
    pump->start();
    (s == 0 ? pumps.out : pumps.err) = std::move(pump);
  }
  return pumps;
}

}  // namespace ddp::launcher
