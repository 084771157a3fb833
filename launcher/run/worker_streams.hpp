// SPDX-License-Identifier: MIT
#pragma once
/// The pipes and log files of one worker: which stream goes to the console, which to a log file
/// (--redirects, --tee, --local-ranks-filter), and the pumps that carry them on the loop. The
/// Agent asks for them and hands the worker's ends to the spawn; it owns no descriptor itself.

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "launcher/common/result.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/output/line_prefix.hpp"
#include "launcher/output/output_sink.hpp"
#include "launcher/output/stream_pump.hpp"

namespace ddp::launcher {

class WorkerStreams {
 public:
  using FileError = std::function<void(const std::string& path, int error)>;
  /// Opens both pipes and the log files the configuration asks for (in `dir`). A log file that
  /// cannot be opened, or fails later, is reported through `on_file_error` and its stream goes
  /// to the console instead (nothing is lost); a pipe that cannot be made is an error (exit 70)
  /// and leaves nothing open.
  /// `attempt_dir` holds the files shared by every rank (--duplicate-std*-filters). With --events
  /// on stdout, the worker's stdout goes to `stderr_sink` (stdout carries only events).
  static Result<WorkerStreams> open(boost::asio::io_context& io, const LaunchConfig& config,
                                    int local_rank, const std::string& dir,
                                    const std::string& attempt_dir, OutputSink& stdout_sink,
                                    OutputSink& stderr_sink, const FileError& on_file_error);
  WorkerStreams(WorkerStreams&& other) noexcept;
  WorkerStreams& operator=(WorkerStreams&&) = delete;
  WorkerStreams(const WorkerStreams&) = delete;
  ~WorkerStreams();

  /// The worker's ends, for the spawn.
  int worker_stdout() const { return write_fd_[0]; }
  int worker_stderr() const { return write_fd_[1]; }

  /// Before start(): `hook` is called for each read of either stream that completes a line
  /// (the health monitor's output progress, docs/health.md). Empty: none.
  void on_line(const std::function<void()>& hook);

  struct Pumps {
    std::shared_ptr<StreamPump> out;
    std::shared_ptr<StreamPump> err;
  };
  /// After the spawn (successful or not): closes the worker's ends and starts carrying the
  /// streams, each console line prefixed as `style` says for `fields` (colored when
  /// --color/NO_COLOR and the console allow: `no_color_env` is NO_COLOR's value, if set).
  Pumps start(boost::asio::io_context& io, const LinePrefixStyle& style, ColorMode color,
              const PrefixFields& fields, const std::optional<std::string>& no_color_env);

 private:
  WorkerStreams() = default;
  OutputSink* notices_ = nullptr;  // ddprun's stderr, for its own notices
  int write_fd_[2] = {-1, -1};
  int read_fd_[2] = {-1, -1};
  StreamRoute route_[2];
};

}  // namespace ddp::launcher
