#pragma once
/// Pure parsing of `scontrol -o show node NAME` output (the I/O is in resolve_master.cpp).

#include <optional>
#include <string>
#include <string_view>

namespace ddp::launcher::scheduler {

/// The NodeAddr= value of the first node record in scontrol's output, or nullopt when absent or
/// empty (e.g. "Node n9 not found").
std::optional<std::string> parse_scontrol_node_addr(std::string_view scontrol_output);

}  // namespace ddp::launcher::scheduler
