#pragma once

// Minimal line logger for the store: one line per event on stderr, or into a sink a test or the
// launcher installs. Thread-safe; the store itself logs only from its io_context thread.

#include <functional>
#include <string>
#include <string_view>

namespace ddp::rdzv {

using LogSink = std::function<void(std::string_view line)>;

// Replace the destination of log lines (nullptr restores stderr). Returns the previous sink.
LogSink set_log_sink(LogSink sink);
void log_line(std::string_view line);

}  // namespace ddp::rdzv
