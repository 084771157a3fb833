// SPDX-License-Identifier: MIT
#pragma once
/// The one way ddprun turns JSON into text: host names, arguments, run ids and worker output are
/// bytes, not UTF-8, and nlohmann's plain dump() throws on invalid UTF-8 (type_error 316). Every
/// JSON ddprun writes (events, /status, dry runs, rendezvous keys) goes through here, so an
/// invalid sequence becomes U+FFFD instead of ending the run.
///
/// The text is also inert wherever it lands (`--events -` on a terminal, `curl /status`, a
/// page): nlohmann escapes the C0 controls (ESC as \u001b) but leaves DEL, the C1 controls
/// (U+0080..U+009F, an 8-bit CSI as U+009B), the line and paragraph separators U+2028/9 and the
/// bidi controls (the overrides and isolates U+202A..U+202E, U+2066..U+2069, and the marks
/// U+200E/F and U+061C, which reorder neutral text around them) raw; here they are written as
/// \uXXXX escapes too: the same JSON value, nothing a terminal or a bidi renderer acts on. The set
/// is launcher/common/terminal_text's (docs/health.md, "Job text on a terminal").

#include <nlohmann/json.hpp>
#include <string>

namespace ddp {

namespace json_text_detail {
/// `dumped` (nlohmann's output: valid UTF-8, ASCII outside strings) with the characters above
/// escaped. Every such character is inside a string, so the result is the same JSON value.
inline std::string escape_inert(std::string dumped) {
  if (dumped.find_first_of("\x7f\xc2\xd8\xe2") == std::string::npos) return dumped;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(dumped.size() + 16);
  auto escape = [&](unsigned cp) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 0xF];
  };
  const size_t n = dumped.size();
  for (size_t i = 0; i < n;) {
    const auto b0 = static_cast<unsigned char>(dumped[i]);
    if (b0 == 0x7F) {
      escape(0x7F);
      i += 1;
      continue;
    }
    if (b0 == 0xC2 && i + 1 < n) {
      const auto b1 = static_cast<unsigned char>(dumped[i + 1]);
      if (b1 >= 0x80 && b1 <= 0x9F) {  // U+0080..U+009F
        escape(b1);
        i += 2;
        continue;
      }
    }
    if (b0 == 0xD8 && i + 1 < n && static_cast<unsigned char>(dumped[i + 1]) == 0x9C) {
      escape(0x061C);  // ARABIC LETTER MARK
      i += 2;
      continue;
    }
    if (b0 == 0xE2 && i + 2 < n) {
      const auto b1 = static_cast<unsigned char>(dumped[i + 1]);
      const auto b2 = static_cast<unsigned char>(dumped[i + 2]);
      const unsigned cp = 0x2000u | ((b1 & 0x3Fu) << 6) | (b2 & 0x3Fu);
      if ((b1 & 0xC0) == 0x80 && (b2 & 0xC0) == 0x80 &&
          (cp == 0x200E || cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) ||
           (cp >= 0x2066 && cp <= 0x2069))) {
        escape(cp);
        i += 3;
        continue;
      }
    }
    out += dumped[i];
    i += 1;
  }
  return out;
}
}  // namespace json_text_detail

/// `j` on one line; invalid UTF-8 in any string is replaced by U+FFFD; DEL, C1 and bidi controls
/// are \u escapes (see above).
inline std::string dump_json(const nlohmann::json& j) {
  return json_text_detail::escape_inert(
      j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace ddp
