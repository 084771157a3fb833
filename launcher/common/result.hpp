// SPDX-License-Identifier: MIT
#pragma once
/// Result<T>: the value of an operation that can fail in an expected way (bad input, a missing
/// program), or the Error that says why and which exit code ddprun should end with.
/// Exceptions stay for programmer errors; expected failures travel as values (style R7).

#include <string>
#include <utility>
#include <variant>

namespace ddp::launcher {

/// One expected failure: a one-line message (no "ddprun:" prefix, no newline) and the exit code.
struct Error {
  int exit_code = 0;
  std::string message;
};

template <class T>
class Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : state_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<T>(state_); }
  const T& value() const { return std::get<T>(state_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<Error>(state_); }

 private:
  std::variant<T, Error> state_;
};

/// Result<void> stand-in: success carries nothing.
struct Ok {};

}  // namespace ddp::launcher
