// SPDX-License-Identifier: MIT
#pragma once
/// Pure parsers for the values of torchrun's flags. Each returns the parsed value or an Error
/// with a one-line message naming the flag and the bad value (exit code 2).

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/common/result.hpp"

namespace ddp::launcher {

/// --nnodes: "N" or "MIN:MAX" with 0 < MIN <= MAX.
struct NodeRange {
  int min = 1;
  int max = 1;
  bool operator==(const NodeRange&) const = default;
};
Result<NodeRange> parse_node_range(std::string_view text);

/// A whole decimal number in [lo, hi], or an Error naming `flag`.
Result<long long> parse_integer(std::string_view flag, std::string_view text, long long lo,
                                long long hi);

/// A non-negative number of seconds (may be fractional) up to kMaxSeconds (a year), or an Error
/// naming `flag`: flags and environment variables alike.
inline constexpr double kMaxSeconds = 86400.0 * 365;
Result<double> parse_seconds(std::string_view flag, std::string_view text);

/// torchrun's Std: which of a worker's streams a setting applies to.
enum class StreamSet { None = 0, Out = 1, Err = 2, All = 3 };
inline bool includes_stdout(StreamSet s) { return (static_cast<int>(s) & 1) != 0; }
inline bool includes_stderr(StreamSet s) { return (static_cast<int>(s) & 2) != 0; }

/// --redirects / --tee: "0".."3" for every rank, or a per-local-rank map "0:1,1:2".
struct StreamSpec {
  StreamSet all = StreamSet::None;
  std::map<int, StreamSet> per_rank;  // used when not empty; missing ranks get None
  bool operator==(const StreamSpec&) const = default;
  StreamSet for_rank(int local_rank) const;
};
Result<StreamSpec> parse_stream_spec(std::string_view flag, std::string_view text);

/// --local_ranks_filter "0,3": empty text means "show every rank" (nullopt).
Result<std::optional<std::set<int>>> parse_ranks_filter(std::string_view text);

/// --rdzv_conf "k1=v1,k2=v2".
Result<std::map<std::string, std::string>> parse_key_values(std::string_view flag,
                                                            std::string_view text);

/// "host[:port]" (IPv6 as [addr]:port). Port 0 when absent.
struct HostPort {
  std::string host;
  int port = 0;
};
Result<HostPort> parse_host_port(std::string_view flag, std::string_view text);

/// --preload's value: a comma list of module names (dotted identifiers). Errors are usage errors
/// (exit 2), one line.
Result<std::vector<std::string>> parse_preload_modules(const std::string& list);

}  // namespace ddp::launcher
