// SPDX-License-Identifier: MIT
#pragma once
/// The --rdzv_conf keys: one table of (key, what it does, how its value is parsed into the
/// settings). config_from_options() warns about any key not in it (torchrun's handlers ignore
/// keys they do not read) and checks the elastic flags with their keys' parsers;
/// multinode_settings() parses every value through it; --help and the unit test that keeps
/// docs/flags.md's list whole read it too.

#include <span>
#include <string>
#include <string_view>

#include "launcher/common/result.hpp"
#include "launcher/config/rdzv_settings.hpp"

namespace ddp::launcher {

struct RdzvConfKey {
  std::string_view key;
  std::string_view doc;  // one line: what it sets, its default
  /// Parses `value` into `into`. A bad value: one line naming `label` ("--rdzv_conf KEY", or the
  /// flag that spells the key), exit 2.
  Result<Ok> (*apply)(std::string_view label, const std::string& value, MultiNodeSettings& into);
};

/// Every key ddprun reads, in the order --help lists them.
std::span<const RdzvConfKey> rdzv_conf_keys();

/// The entry for `key`; nullptr for a key ddprun does not read.
const RdzvConfKey* find_rdzv_conf_key(std::string_view key);

/// "join_timeout, last_call_timeout, ...": every key, for --help and messages.
std::string rdzv_conf_key_names();

}  // namespace ddp::launcher
