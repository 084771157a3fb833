// SPDX-License-Identifier: MIT
#include "launcher/common/utc_time.hpp"

#include <fmt/format.h>

#include <ctime>

namespace ddp::launcher {

std::string format_utc(std::chrono::system_clock::time_point t) {
  auto secs = std::chrono::system_clock::to_time_t(t);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03d} UTC", buf, static_cast<int>(ms));
}

}  // namespace ddp::launcher
