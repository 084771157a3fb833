// SPDX-License-Identifier: MIT
#pragma once
/// The one way ddprun turns JSON into text: host names, arguments, run ids and worker output are
/// bytes, not UTF-8, and nlohmann's plain dump() throws on invalid UTF-8 (type_error 316). Every
/// JSON ddprun writes (events, /status, dry runs, rendezvous keys) goes through here, so an
/// invalid sequence becomes U+FFFD instead of ending the run.

#include <nlohmann/json.hpp>
#include <string>

namespace ddp {

/// `j` on one line; invalid UTF-8 in any string is replaced by U+FFFD.
inline std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ddp
