// SPDX-License-Identifier: MIT
#pragma once
/// Text that came from a job (a host name, a timer's scope id, an error file's message, a worker's
/// stderr tail) made safe to show a person on a terminal, and its width in terminal columns.
/// Every view ddprun draws for a person (`ddprun top`, `ddprun report`, the failure summary, the
/// join progress line) passes job text through here; worker output lines themselves do not (they
/// stay byte-identical, docs/output.md).
///
/// What is shown visibly instead of acting on the terminal (docs/health.md, "Job text on a
/// terminal"):
///   - C0 controls and DEL in caret notation, as `cat -v`: ESC `^[`, BEL `^G`, CR `^M`, DEL `^?`
///     (tab and, in a block, newline are kept; in a line, tab is a space and newline `^J`);
///   - C1 controls (U+0080..U+009F, a CSI as U+009B included) and the bidirectional overrides and
///     isolates (U+202A..U+202E, U+2066..U+2069, the "Trojan Source" characters), the marks
///     U+200E/F and U+061C, and U+2028/9 as `\u009b`;
///   - bytes that are not UTF-8 as `\xNN`.
/// Pure: no locale, no terminal.

#include <string>
#include <string_view>

namespace ddp::launcher {

/// One line: nothing in the result moves the cursor or changes the terminal.
std::string visible_line(std::string_view text);
/// Several lines: as visible_line, but newlines and tabs are kept.
std::string visible_block(std::string_view text);

/// Terminal columns of `text` (valid UTF-8 with no controls, e.g. visible_line's): East Asian
/// wide and fullwidth characters and most emoji take 2, combining marks and zero-width ones 0.
int display_width(std::string_view text);

/// `text` made visible (visible_line), then cut or padded with spaces to exactly `columns` terminal
/// columns (a wide character that would straddle the edge becomes a space).
std::string fit_columns(std::string_view text, int columns);

}  // namespace ddp::launcher
