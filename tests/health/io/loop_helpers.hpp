// SPDX-License-Identifier: MIT
#pragma once
// Runs an io_context until a condition holds. The bound only keeps a broken build from hanging the
// suite; no assertion depends on how long anything takes.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>

namespace ddp::testing {

inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::seconds bound = std::chrono::seconds(60)) {
  auto until = std::chrono::steady_clock::now() + bound;
  while (!done() && std::chrono::steady_clock::now() < until) {
    io.restart();
    io.run_for(std::chrono::milliseconds(20));
  }
  return done();
}

}  // namespace ddp::testing
