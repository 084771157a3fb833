// SPDX-License-Identifier: MIT
#pragma once
/// The frame `ddprun top` draws: a pure function of the status model, the rate history and the
/// terminal's size. Every line fits the width (counted in characters); the frame fits the
/// height (at least 80x24 is assumed usable; smaller still gets the header and the worst ranks).
/// Colour (ANSI SGR, whole lines) only when asked (NO_COLOR unset and a terminal).

#include <string>
#include <vector>

#include "launcher/view/status_model.hpp"

namespace ddp::launcher::view {

struct FrameOptions {
  int width = 80;
  int height = 24;
  bool color = false;
  std::string source;  // "HOST:PORT", for the footer
  std::string footer;  // e.g. "q quits"
  std::string notice;  // e.g. "cannot reach ...; retrying" (shown under the header)
};

std::vector<std::string> render_frame(const StatusModel& model, const RateHistory& rates,
                                      const FrameOptions& options);

/// `text` cut or padded to exactly `width` characters (UTF-8 code points).
std::string fit(const std::string& text, int width);
/// Eighth-block sparkline of `values` (the last `width` of them), scaled to their maximum.
std::string sparkline(const std::vector<double>& values, int width);

}  // namespace ddp::launcher::view
