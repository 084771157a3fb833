#include "launcher/scheduler/slurm_node_addr.hpp"

namespace ddp::launcher::scheduler {

std::optional<std::string> parse_scontrol_node_addr(std::string_view text) {
  constexpr std::string_view kKey = "NodeAddr=";
  for (std::size_t pos = text.find(kKey); pos != std::string_view::npos;
       pos = text.find(kKey, pos + 1)) {
    // A whole token only: not the tail of another key such as "ActiveNodeAddr=".
    if (pos != 0 && text[pos - 1] != ' ' && text[pos - 1] != '\n' && text[pos - 1] != '\t')
      continue;
    std::size_t start = pos + kKey.size();
    std::size_t end = text.find_first_of(" \t\r\n", start);
    std::string_view value = text.substr(start, end == std::string_view::npos ? end : end - start);
    if (value.empty() || value == "(null)") return std::nullopt;
    return std::string(value);
  }
  return std::nullopt;
}

}  // namespace ddp::launcher::scheduler
