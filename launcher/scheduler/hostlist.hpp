#pragma once
/// Slurm compressed host lists ("node[01-04,10]", "a[1-2]-ib,b3", "rack[1-2]-n[01-02]") expanded
/// in pure C++, so detection never needs `scontrol show hostnames`.

#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher::scheduler {

/// Expands a compressed host list in Slurm's order (left to right; with several bracket groups in
/// one name the last group varies fastest). Zero padding follows the lower bound's width
/// ("n[08-10]" gives n08 n09 n10). Throws SchedulerError quoting the whole list on any syntax
/// error (unbalanced or nested brackets, empty names or ranges, descending ranges, non-digits)
/// or when the list would expand to more than kMaxHosts names.
std::vector<std::string> expand_hostlist(std::string_view list);

/// The first host of a compressed list (the whole list is still validated).
std::string first_host(std::string_view list);

inline constexpr std::size_t kMaxHosts = 1'000'000;

}  // namespace ddp::launcher::scheduler
