// SPDX-License-Identifier: MIT
#include "launcher/output/line_prefix.hpp"

#include <fmt/format.h>

#include "common/exit_codes.hpp"

namespace ddp::launcher {
namespace {

bool identifier_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool identifier_char(char c) { return identifier_start(c) || (c >= '0' && c <= '9'); }

std::optional<std::string> macro_value(std::string_view name, const PrefixFields& f) {
  if (name == "role_name") return f.role_name;
  if (name == "rank") return std::to_string(f.rank);
  if (name == "local_rank") return std::to_string(f.local_rank);
  if (name == "hostname") return f.hostname;
  return std::nullopt;
}

}  // namespace

Result<ColorMode> parse_color_mode(std::string_view text) {
  if (text == "auto") return ColorMode::Auto;
  if (text == "always") return ColorMode::Always;
  if (text == "never") return ColorMode::Never;
  return Error{exit_codes::kUsage,
               fmt::format("--color: '{}' is not one of auto, always, never", text)};
}

bool use_color(ColorMode mode, bool console_is_tty,
               const std::optional<std::string>& no_color_env) {
  switch (mode) {
    case ColorMode::Always:
      return true;
    case ColorMode::Never:
      return false;
    case ColorMode::Auto:
      break;
  }
  return console_is_tty && !(no_color_env && !no_color_env->empty());
}

std::string substitute_template(std::string_view text, const PrefixFields& fields) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char next = text[i + 1];
    if (next == '$') {  // "$$" is a literal '$'
      out += '$';
      ++i;
      continue;
    }
    if (next == '{') {
      size_t close = text.find('}', i + 2);
      std::string_view name =
          close == std::string_view::npos ? std::string_view() : text.substr(i + 2, close - i - 2);
      bool valid = !name.empty() && identifier_start(name[0]);
      for (char c : name) valid = valid && identifier_char(c);
      auto value = valid ? macro_value(name, fields) : std::nullopt;
      if (value) {
        out += *value;
        i = close;
      } else {
        out += '$';  // safe_substitute: left as typed
      }
      continue;
    }
    if (identifier_start(next)) {
      size_t end = i + 1;
      while (end < text.size() && identifier_char(text[end])) ++end;
      auto value = macro_value(text.substr(i + 1, end - i - 1), fields);
      if (value) {
        out += *value;
        i = end - 1;
        continue;
      }
    }
    out += '$';
  }
  return out;
}

std::string console_line_prefix(const LinePrefixStyle& style, const PrefixFields& fields,
                                bool color) {
  if (style.none) return {};
  if (style.tmpl) return substitute_template(*style.tmpl, fields);
  if (!color) return fmt::format("[rank{}]:", fields.rank);
  static constexpr int kColors[] = {32, 34, 35, 36, 33, 31};
  return fmt::format("\x1b[{}m[rank{}]:\x1b[0m", kColors[fields.rank % 6], fields.rank);
}

}  // namespace ddp::launcher
