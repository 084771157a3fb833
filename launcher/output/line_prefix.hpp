// SPDX-License-Identifier: MIT
#pragma once
/// The prefix of each worker line on ddprun's console, and whether it is colored. Pure.
///
/// - --no-prefix: nothing (the lines exactly as the worker wrote them).
/// - --log-line-prefix-template / TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: torchrun's template,
///   substituted like Python's string.Template.safe_substitute (${name} or $name; $$ is '$';
///   unknown names stay as typed), for every console stream. Never colored.
/// - otherwise ddprun's "[rank<N>]:" (colored when use_color() says so), on every console stream.
///   (torchrun prefixes only --tee'd streams, with "[${role_name}${local_rank}]:"; pass that as
///   the template to get its lines.)

#include <optional>
#include <string>
#include <string_view>

#include "launcher/common/result.hpp"

namespace ddp::launcher {

/// --color: auto (a terminal, and NO_COLOR unset or empty), always or never.
enum class ColorMode { Auto, Always, Never };
Result<ColorMode> parse_color_mode(std::string_view text);

/// Whether to color. `no_color_env`: the value of NO_COLOR, if set (https://no-color.org:
/// a non-empty value turns color off; --color=always still wins).
bool use_color(ColorMode mode, bool console_is_tty, const std::optional<std::string>& no_color_env);

/// How console lines are prefixed (resolved from the flags by config_from_options()).
struct LinePrefixStyle {
  bool none = false;                // --no-prefix
  std::optional<std::string> tmpl;  // the template, when one was given
};

/// What the template's macros expand to for one worker.
struct PrefixFields {
  std::string role_name;
  int rank = 0;
  int local_rank = 0;
  std::string hostname;
};

/// Python's string.Template(text).safe_substitute(...) for the four macros.
std::string substitute_template(std::string_view text, const PrefixFields& fields);

/// The prefix for one worker stream on the console.
std::string console_line_prefix(const LinePrefixStyle& style, const PrefixFields& fields,
                                bool color);

}  // namespace ddp::launcher
