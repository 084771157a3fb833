// SPDX-License-Identifier: MIT
#pragma once
/// The @record error files (TORCHELASTIC_ERROR_FILE) on disk: reading a worker's, and copying the
/// root cause's to ddprun's own, as torchrun's @record on its main does. A worker controls its
/// error file's path (it may make it a FIFO, or a symlink to /dev/zero), so reading never
/// follows a link to anything but a regular file, never opens a FIFO or a device, never blocks
/// and reads at most kMaxErrorFileBytes.

#include <cstddef>
#include <optional>
#include <string>

#include "launcher/common/result.hpp"

namespace ddp::launcher {

inline constexpr size_t kMaxErrorFileBytes = size_t{1} << 20;

/// The text of the error file at `path`; nullopt when there is none or it is not a regular file
/// of at most kMaxErrorFileBytes (`why`, when given, then says which, empty for "none").
std::optional<std::string> read_error_file(const std::string& path, std::string* why = nullptr);

/// torchrun: the root cause's error file (`text`) with message.errorCode set to `exit_code` (the
/// worker's exit code, or minus its signal), written to `destination`, replacing what was there.
/// Error (exit 70) when it cannot be written.
Result<Ok> copy_error_file(const std::string& text, int exit_code, const std::string& destination);

}  // namespace ddp::launcher
