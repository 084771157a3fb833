// SPDX-License-Identifier: MIT
#pragma once
/// Reporting a worker's fatal error to the launcher the way PyTorch's
/// torch.distributed.elastic.multiprocessing.errors does: a JSON file at TORCHELASTIC_ERROR_FILE
///   {"message": {"message": "<Type>: <what>",
///                "extraInfo": {"py_callstack": "<trace>", "timestamp": "<unix seconds>"}}}
/// which ddprun/torchrun read to name the root cause in their failure summary. No LibTorch here.

#include <exception>
#include <functional>
#include <string>
#include <string_view>

namespace ddp::worker {

/// `text` with every byte that is not part of valid UTF-8 written as the four characters
/// "\xNN", so any message (a data path in Latin-1, a torn multi-byte character) stays readable
/// and fits in JSON.
std::string printable_utf8(std::string_view text);

/// The JSON text PyTorch's ErrorHandler.record_exception writes. Never throws on content:
/// bytes that are not UTF-8 are escaped with printable_utf8.
std::string error_file_json(std::string_view message, std::string_view callstack,
                            long long unix_seconds);

/// Writes error_file_json to `path` (temp file + rename, so a reader never sees half a file).
/// Returns false (and says why on stderr) when the file cannot be written; the temp file is
/// removed then. Never throws.
bool write_error_file(const std::string& path, std::string_view message,
                      std::string_view callstack);

/// "<demangled type>: <message>" for the exception in flight, as Python's f"{type(e).__name__}:
/// {e}"; the second element is the longest description available (c10::Error carries a C++
/// backtrace).
struct DescribedException {
  std::string message;
  std::string callstack;
};
DescribedException describe_exception(std::exception_ptr error);

/// Runs `body`; an escaping exception is printed as one line on stderr, written to `error_file`
/// (when non-empty) and turned into exit code 1. Returns body's exit code otherwise. Reporting
/// itself never throws (any message bytes, a full disk under the error file).
int run_reporting_errors(const std::string& error_file, const std::function<int()>& body);

}  // namespace ddp::worker
