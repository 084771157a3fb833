// SPDX-License-Identifier: MIT
#pragma once
/// The dashboard (launcher/view/dashboard.html), compiled into the binary at build time
/// (launcher/view/embed_page.cmake), served at / on --status-port.

#include <string_view>

namespace ddp::launcher::view {

std::string_view dashboard_page();

}  // namespace ddp::launcher::view
