#pragma once

// Minimal line logger for the store (and the store proxy): one line per event on stderr, or into a
// sink a test or the launcher installs. Thread-safe; the store itself logs only from its io_context
// thread.

#include <functional>
#include <string>
#include <string_view>

namespace ddp::rdzv {

using LogSink = std::function<void(std::string_view line)>;

// Replace the destination of log lines (nullptr restores stderr). Returns the previous sink.
LogSink set_log_sink(LogSink sink);
// On stderr as "ddprun-store: LINE".
void log_line(std::string_view line);
// For a component with a name of its own (the store proxy): `line` starts with "NAME: " and goes
// to stderr as it is, not as the store's. A sink gets it as it is too.
void log_named_line(std::string_view line);

}  // namespace ddp::rdzv
