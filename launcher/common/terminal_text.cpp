// SPDX-License-Identifier: MIT
#include "launcher/common/terminal_text.hpp"

#include <cstdint>
#include <cstdio>
#include <optional>

namespace ddp::launcher {

namespace {

/// One decoded UTF-8 sequence at `s[i]`: its code point and length; nullopt for a byte that does
/// not start a valid, shortest-form sequence (overlong forms and surrogates included).
struct Decoded {
  char32_t cp;
  size_t len;
};
std::optional<Decoded> decode(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return Decoded{b0, 1};
  size_t len = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return std::nullopt;
  }
  if (i + len > s.size()) return std::nullopt;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  return Decoded{cp, len};
}

bool bidi_control(char32_t cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x200E || cp == 0x200F || cp == 0x061C;
}

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", b);
  return buf;
}

std::string code_point_escape(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
  return buf;
}

std::string visible(std::string_view s, bool block) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto d = decode(s, i);
    if (!d) {
      out += hex_byte(static_cast<unsigned char>(s[i]));
      ++i;
      continue;
    }
    const char32_t cp = d->cp;
    if (cp < 0x20 || cp == 0x7F) {
      if (cp == '\t') {
        out += block ? '\t' : ' ';
      } else if (cp == '\n' && block) {
        out += '\n';
      } else {
        out += '^';
        out += cp == 0x7F ? '?' : static_cast<char>(cp + 0x40);
      }
    } else if ((cp >= 0x80 && cp <= 0x9F) || bidi_control(cp)) {
      out += code_point_escape(cp);
    } else {
      out.append(s.substr(i, d->len));
    }
    i += d->len;
  }
  return out;
}

struct Range {
  char32_t first, last;
};

// Zero-width: combining marks, zero-width spaces and joiners, variation selectors.
constexpr Range kZeroWidth[] = {
    {0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x0610, 0x061A},
    {0x064B, 0x065F}, {0x0E31, 0x0E31}, {0x0E34, 0x0E3A}, {0x0E47, 0x0E4E},
    {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF}, {0x200B, 0x200F}, {0x20D0, 0x20FF},
    {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF}, {0xE0100, 0xE01EF},
};
// Wide: East Asian Wide and Fullwidth, and the emoji blocks terminals draw two columns wide.
constexpr Range kWide[] = {
    {0x1100, 0x115F},   {0x231A, 0x231B},   {0x2329, 0x232A},   {0x23E9, 0x23EC},
    {0x23F0, 0x23F0},   {0x23F3, 0x23F3},   {0x25FD, 0x25FE},   {0x2614, 0x2615},
    {0x2648, 0x2653},   {0x267F, 0x267F},   {0x2693, 0x2693},   {0x26A1, 0x26A1},
    {0x26AA, 0x26AB},   {0x26BD, 0x26BE},   {0x26C4, 0x26C5},   {0x26CE, 0x26CE},
    {0x26D4, 0x26D4},   {0x26EA, 0x26EA},   {0x26F2, 0x26F5},   {0x26FA, 0x26FD},
    {0x2705, 0x2705},   {0x270A, 0x270B},   {0x2728, 0x2728},   {0x274C, 0x274C},
    {0x274E, 0x274E},   {0x2753, 0x2755},   {0x2757, 0x2757},   {0x2795, 0x2797},
    {0x27B0, 0x27B0},   {0x27BF, 0x27BF},   {0x2B1B, 0x2B1C},   {0x2B50, 0x2B50},
    {0x2B55, 0x2B55},   {0x2E80, 0x303E},   {0x3041, 0x33FF},   {0x3400, 0x4DBF},
    {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},   {0xA960, 0xA97F},   {0xAC00, 0xD7A3},
    {0xF900, 0xFAFF},   {0xFE10, 0xFE19},   {0xFE30, 0xFE6F},   {0xFF00, 0xFF60},
    {0xFFE0, 0xFFE6},   {0x16FE0, 0x18AFF}, {0x1B000, 0x1B2FF}, {0x1F004, 0x1F004},
    {0x1F0CF, 0x1F0CF}, {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A}, {0x1F200, 0x1F2FF},
    {0x1F300, 0x1F64F}, {0x1F680, 0x1F6FF}, {0x1F7E0, 0x1F7EB}, {0x1F90C, 0x1F9FF},
    {0x1FA70, 0x1FAFF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD},
};

template <size_t N>
bool in(const Range (&table)[N], char32_t cp) {
  size_t lo = 0, hi = N;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (cp < table[mid].first) {
      hi = mid;
    } else if (cp > table[mid].last) {
      lo = mid + 1;
    } else {
      return true;
    }
  }
  return false;
}

int char_width(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) return 0;
  if (in(kZeroWidth, cp)) return 0;
  return in(kWide, cp) ? 2 : 1;
}

}  // namespace

std::string visible_line(std::string_view text) { return visible(text, false); }

std::string visible_block(std::string_view text) { return visible(text, true); }

int display_width(std::string_view text) {
  int width = 0;
  for (size_t i = 0; i < text.size();) {
    auto d = decode(text, i);
    if (!d) {
      width += 4;  // shown as \xNN
      ++i;
      continue;
    }
    width += char_width(d->cp);
    i += d->len;
  }
  return width;
}

std::string fit_columns(std::string_view text, int columns) {
  const std::string shown = visible_line(text);
  std::string out;
  out.reserve(shown.size());
  int used = 0;
  for (size_t i = 0; i < shown.size();) {
    auto d = decode(shown, i);  // always valid: visible_line's output is UTF-8
    const size_t len = d ? d->len : 1;
    const int w = d ? char_width(d->cp) : 1;
    if (used + w > columns) break;
    out.append(shown, i, len);
    used += w;
    i += len;
  }
  if (used < columns) out.append(static_cast<size_t>(columns - used), ' ');
  return out;
}

}  // namespace ddp::launcher
