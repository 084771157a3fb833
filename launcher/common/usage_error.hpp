// SPDX-License-Identifier: MIT
#pragma once
/// The Error for a bad flag or value: exit code kUsage (2), as torchrun's argparse.

#include <string>
#include <utility>

#include "common/exit_codes.hpp"
#include "launcher/common/result.hpp"

namespace ddp::launcher {

inline Error usage_error(std::string message) {
  return Error{exit_codes::kUsage, std::move(message)};
}

}  // namespace ddp::launcher
