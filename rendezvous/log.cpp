#include "rendezvous/log.hpp"

#include <cstdio>
#include <mutex>

namespace ddp::rdzv {
namespace {

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

LogSink& current_sink() {
  static LogSink sink;
  return sink;
}

}  // namespace

LogSink set_log_sink(LogSink sink) {
  std::lock_guard lock(sink_mutex());
  LogSink previous = std::move(current_sink());
  current_sink() = std::move(sink);
  return previous;
}

void log_line(std::string_view line) {
  std::lock_guard lock(sink_mutex());
  if (current_sink()) {
    current_sink()(line);
    return;
  }
  std::fprintf(stderr, "ddprun-store: %.*s\n", static_cast<int>(line.size()), line.data());
}

}  // namespace ddp::rdzv
