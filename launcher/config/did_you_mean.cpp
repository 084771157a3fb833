// SPDX-License-Identifier: MIT
#include "launcher/config/did_you_mean.hpp"

#include <algorithm>
#include <cctype>

namespace ddp::launcher {
namespace {

std::string folded(std::string_view word) {
  std::string out(word);
  for (char& c : out) {
    c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

/// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
/// neighbouring letters (the commonest typo) each count one.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

bool has_underscore(std::string_view word) { return word.find('_') != std::string_view::npos; }

}  // namespace

std::optional<std::string> closest_spelling(std::string_view typed,
                                            const std::vector<std::string>& known) {
  if (std::find(known.begin(), known.end(), typed) != known.end()) return std::nullopt;
  // No option or key is this long; the distance table grows with the product of the lengths.
  if (typed.size() > kMaxSpellingLength) return std::nullopt;
  const std::string want = folded(typed);
  const size_t limit = std::max<size_t>(1, std::min<size_t>(3, typed.size() / 4));
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  bool best_same_family = false;
  for (const auto& word : known) {
    const size_t distance = edit_distance(want, folded(word));
    const bool same_family = has_underscore(word) == has_underscore(typed);
    if (distance < best_distance ||
        (distance == best_distance && same_family && !best_same_family)) {
      best = word;
      best_distance = distance;
      best_same_family = same_family;
    }
  }
  return best;
}

}  // namespace ddp::launcher
