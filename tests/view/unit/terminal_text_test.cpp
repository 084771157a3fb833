// SPDX-License-Identifier: MIT
// The one sanitiser for job text on a terminal (launcher/common/terminal_text.hpp).
#include <doctest/doctest.h>

#include <string>

#include "launcher/common/terminal_text.hpp"
#include "rendezvous/json_text.hpp"

using ddp::launcher::display_width;
using ddp::launcher::fit_columns;
using ddp::launcher::visible_block;
using ddp::launcher::visible_line;

namespace {
bool raw_control(const std::string& s) {
  for (unsigned char c : s) {
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) return true;
  }
  // A C1 control encoded in UTF-8 (U+0080..U+009F is C2 80..C2 9F).
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (static_cast<unsigned char>(s[i]) == 0xC2 && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(s[i + 1]) <= 0x9F)
      return true;
  }
  return false;
}
}  // namespace

TEST_CASE("escape sequences a job could send are shown, not acted on") {
  // A title change (OSC 0 ... BEL), the clipboard (OSC 52 ... ST), a screen clear (CSI 2J).
  const std::string hostile =
      "node\x1b]0;pwned\x07-a\x1b]52;c;ZWNobyBoaQ==\x1b\\-b\x1b[2J\x1b[H end";
  const std::string shown = visible_line(hostile);
  CHECK(shown == "node^[]0;pwned^G-a^[]52;c;ZWNobyBoaQ==^[\\-b^[[2J^[[H end");
  CHECK_FALSE(raw_control(shown));
  CHECK(visible_line("a\rb\bc\x7f") == "a^Mb^Hc^?");
}

TEST_CASE("C1 controls, bidi overrides and bytes that are not UTF-8 are shown visibly") {
  CHECK(visible_line("x\xC2\x9B"
                     "2Jy") == "x\\u009b2Jy");  // an 8-bit CSI
  CHECK(visible_line("a\xE2\x80\xAE"
                     "b") == "a\\u202eb");  // RIGHT-TO-LEFT OVERRIDE
  // The bidi marks reorder neutral text around them as the overrides do: RLM, LRM, ALM.
  CHECK(visible_line("a\xE2\x80\x8F\xE2\x80\x8E\xD8\x9C"
                     "b") == "a\\u200f\\u200e\\u061cb");
  CHECK(visible_line("bad\xFF\xC3") == "bad\\xff\\xc3");     // invalid, then cut short
  CHECK(visible_line("\xC0\xAF") == "\\xc0\\xaf");           // overlong '/'
  CHECK(visible_line("\xED\xA0\x80") == "\\xed\\xa0\\x80");  // a surrogate
  CHECK(visible_line("caf\xC3\xA9 \xE6\x97\xA5") == "caf\xC3\xA9 \xE6\x97\xA5");  // kept
}

TEST_CASE(
    "a line turns tabs and newlines into something that stays on the line; a block keeps them") {
  CHECK(visible_line("a\tb\nc") == "a b^Jc");
  CHECK(visible_block("a\tb\nc\x1b[31m") == "a\tb\nc^[[31m");
  CHECK_FALSE(raw_control(visible_block("x\x1b]0;t\x07\n\x9b")));
}

TEST_CASE("display width counts terminal columns") {
  CHECK(display_width("abc") == 3);
  CHECK(display_width("\xE6\x97\xA5\xE6\x9C\xAC") == 4);  // 日本
  CHECK(display_width("e\xCC\x81") == 1);                 // e + combining acute
  CHECK(display_width("\xF0\x9F\x98\x80") == 2);          // 😀
  CHECK(display_width("\xE2\x96\x81") == 1);              // ▁ (sparkline block)
}

TEST_CASE("fit_columns cuts and pads in columns, never splitting a wide character") {
  CHECK(fit_columns("abc", 5) == "abc  ");
  CHECK(fit_columns("abcdef", 3) == "abc");
  // 日本語 is 6 columns: at 5 the third character does not fit and its column is padded.
  CHECK(fit_columns("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", 5) == "\xE6\x97\xA5\xE6\x9C\xAC ");
  CHECK(display_width(fit_columns("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", 5)) == 5);
  // The escape's visible form is what is cut.
  CHECK(fit_columns("\x1b[2J", 3) == "^[[");
}

TEST_CASE("dump_json escapes DEL, C1 and bidi controls: the same JSON value, nothing raw") {
  // ESC (C0) nlohmann escapes itself; DEL, a C1 CSI, RLO, LRI, PDI and U+2028 it would not.
  const std::string text =
      "a\x1b[2J\x7f\xC2\x9B"
      "31m\xE2\x80\xAE"
      "evil\xE2\x81\xA6x\xE2\x81\xA9\xE2\x80\xA8z";
  const std::string dumped = ddp::dump_json(nlohmann::json{{"message", text}});
  CHECK(dumped == R"({"message":"a\u001b[2J\u007f\u009b31m\u202eevil\u2066x\u2069\u2028z"})");
  CHECK(nlohmann::json::parse(dumped)["message"] == text);  // the same content
  // The bidi marks RLM, LRM and ALM too (the breaker saw them raw in /status and top).
  const std::string marks = "\xE2\x80\x8F|\xE2\x80\x8E|\xD8\x9C";
  CHECK(ddp::dump_json(marks) == R"("\u200f|\u200e|\u061c")");
  CHECK(nlohmann::json::parse(ddp::dump_json(marks)) == marks);
  // Other text is untouched: é, 日, ▁ (E2 96 81), the U+2030 per-mille sign (E2 80 B0).
  const std::string kept = "caf\xC3\xA9 \xE6\x97\xA5 \xE2\x96\x81 \xE2\x80\xB0";
  CHECK(ddp::dump_json(kept) == "\"" + kept + "\"");
  // Invalid UTF-8 still becomes U+FFFD, and a C1 byte that is not UTF-8 is no C1 character.
  CHECK(ddp::dump_json(std::string("\x9b")) == "\"\xEF\xBF\xBD\"");
}
