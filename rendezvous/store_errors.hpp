#pragma once

#include <stdexcept>

namespace ddp::rdzv {

// Errors a store client reports; each what() is one line naming what failed.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The server could not be reached within connect_timeout.
class StoreConnectError : public StoreError {
 public:
  using StoreError::StoreError;
};
// Nothing listens on the store's address (ECONNREFUSED on every address it resolves to).
class StoreRefusedError : public StoreError {
 public:
  using StoreError::StoreError;
};
// The store refused this client's token, or does not speak the token handshake. Never retried.
class StoreAuthError : public StoreError {
 public:
  using StoreError::StoreError;
};
// A WAIT/get/blocking pop did not complete within its timeout (the server state is intact).
class StoreTimeoutError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace ddp::rdzv
