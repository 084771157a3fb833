// SPDX-License-Identifier: MIT
#pragma once
/// The frame `ddprun top` draws: a pure function of the status model, the rate history and the
/// terminal's size. Every line fits the width (in terminal columns, wide characters counted twice);
/// the frame fits the height (at least 80x24 is assumed usable; smaller still gets the header and
/// the worst ranks). Colour (ANSI SGR, whole lines) only when asked (NO_COLOR unset and a
/// terminal).

#include <optional>
#include <string>
#include <vector>

#include "launcher/view/status_model.hpp"

namespace ddp::launcher::view {

/// How `top` orders and narrows the rank list (keys s, f, n; arrows scroll; ? help).
enum class RankSort { Worst, Rank, Step, Rate };
enum class RankFilter { All, Trouble, Running };

struct FrameOptions {
  int width = 80;
  int height = 24;
  bool color = false;
  std::string source;  // "HOST:PORT", for the footer
  std::string footer;  // e.g. "q quits"
  std::string notice;  // e.g. "cannot reach ...; retrying" (shown under the header)
  /// Failures seen since `top` started (kept across restarts; the model's own when empty).
  std::vector<EventLine> failures{};
  RankSort sort = RankSort::Worst;
  RankFilter filter = RankFilter::All;
  std::optional<int> node{};  // only this node's ranks
  int scroll = 0;             // rank rows skipped at the top (clamped)
  bool help = false;          // the key help instead of the events
};

const char* sort_name(RankSort sort);
const char* filter_name(RankFilter filter);
/// The ranks as the options order and narrow them (pure; the frame draws these).
std::vector<RankStatus> rank_rows(const StatusModel& model, const RateHistory& rates,
                                  const FrameOptions& options);

std::vector<std::string> render_frame(const StatusModel& model, const RateHistory& rates,
                                      const FrameOptions& options);

/// `text` made visible (controls and escapes shown, launcher/common/terminal_text.hpp), then cut
/// or padded to exactly `width` terminal columns. Every line of a frame passes through it.
std::string fit(const std::string& text, int width);
/// A rank's CPU% in at most 4 columns ("7%", "100%", "999+"; "-" when not known).
std::string cpu_text(const std::optional<double>& percent);
/// A size in at most 4 columns, binary units ("512M", "1.2G", "12G"; "-" when not known).
std::string memory_text(const std::optional<long long>& bytes);
/// Eighth-block sparkline of `values` (the last `width` of them), scaled to their maximum.
std::string sparkline(const std::vector<double>& values, int width);

}  // namespace ddp::launcher::view
