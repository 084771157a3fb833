// SPDX-License-Identifier: MIT
#pragma once
/// One bounded HTTP/1.1 GET on the caller's loop (Boost.Beast), for `ddprun top`: connect,
/// request, read, all within `timeout`; the body at most 16 MiB. Over TCP, or over the Unix
/// socket a job serves in its run directory.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <string>

#include "launcher/common/result.hpp"

namespace ddp::launcher::view {

/// Calls `done` on `io` with the body of a 200 answer, or an error (exit 69) saying why.
void async_http_get(boost::asio::io_context& io, const std::string& host, int port,
                    const std::string& path, std::chrono::milliseconds timeout,
                    std::function<void(Result<std::string>)> done);
/// The same over the Unix stream socket at `socket_path` (Host: localhost), answered only if the
/// process serving it is this user's and, when `server_pid` > 0, that process (SO_PEERCRED).
void async_http_get_local(boost::asio::io_context& io, const std::string& socket_path,
                          pid_t server_pid, const std::string& path,
                          std::chrono::milliseconds timeout,
                          std::function<void(Result<std::string>)> done);

}  // namespace ddp::launcher::view
