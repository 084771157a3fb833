// SPDX-License-Identifier: MIT
#pragma once
/// etcd's key ranges, as both fakes (the HTTP gateway fake and the in-process gateway) read them:
/// no range_end is one key, "\0" is every key from `key` on, anything else is [key, end).

#include <string>

namespace ddp::rdzv::etcd::fake {

inline bool in_range(const std::string& k, const std::string& key, const std::string& end) {
  if (end.empty()) return k == key;
  if (end == std::string(1, '\0')) return k >= key;
  return k >= key && k < end;
}

}  // namespace ddp::rdzv::etcd::fake
