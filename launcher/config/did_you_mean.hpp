// SPDX-License-Identifier: MIT
#pragma once
/// "Did you mean": the known spelling closest to a mistyped flag or --rdzv_conf key. Pure.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher {

/// The word of `known` closest to `typed` by edit distance (a swap of two neighbours counts as
/// one edit), comparing '-' and '_' as the same letter and ignoring case, so that both spellings
/// of a flag are considered. Among equally close words, the one written in `typed`'s family
/// (underscores or dashes) wins. Nothing when the closest is more than max(1, min(3, n / 4))
/// edits away, n being `typed`'s length, or when `typed` is itself known.
/// Longer typed words get no suggestion (the search is quadratic in the length).
inline constexpr size_t kMaxSpellingLength = 64;

std::optional<std::string> closest_spelling(std::string_view typed,
                                            const std::vector<std::string>& known);

}  // namespace ddp::launcher
