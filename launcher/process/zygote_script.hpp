// SPDX-License-Identifier: MIT
#pragma once
/// The Python program of the preloaded interpreter (--preload): a one-line bootstrap for `-c`
/// that reads the program proper from its socket, and the program (see zygote.hpp).

#include <string_view>

namespace ddp::launcher {

extern const std::string_view kZygoteBootstrap;
extern const std::string_view kZygoteScript;

}  // namespace ddp::launcher
