// SPDX-License-Identifier: MIT
#pragma once
/// The dashboard (launcher/health/dashboard.html), compiled into the binary at build time
/// (launcher/health/embed_page.cmake), served at / on --status-port.

#include <string_view>

namespace ddp::launcher::health {

std::string_view dashboard_page();

}  // namespace ddp::launcher::health
