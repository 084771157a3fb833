#!/usr/bin/env bash
# The portable x86_64 programs (scripts/package.sh: zig, libc++, glibc 2.28, OpenSSL 1.1 static)
# beside the Debian build (GCC, libstdc++, OpenSSL 3), in one run, with the benchmarks that already
# exist: bench/launcher/ab_compare.py (launch-to-exit of 8 x /bin/true, 0.1 GB of output, peak RSS;
# the two builds interleaved run by run) and bench/store/run_bench.py --baseline-bin (ops/s of
# ddprun-store, interleaved rounds). Ratios are portable / Debian. docs/packaging.md#no-regression.
#   bench/package/portable_vs_debian.sh [DEBIAN_BUILD] [PORTABLE_DIR]
# DEBIAN_BUILD (default build/) needs bin/ddprun, bin/ddprun-store, bin/output_flooder and
# bin/store_loadgen (ninja ddprun ddprun-store output_flooder store_loadgen); PORTABLE_DIR (default
# the x86_64 tree scripts/package.sh staged) needs bin/ddprun and bin/ddprun-store.
# Environment: RUNS (launches per build, default 100), OUTPUT_RUNS (3), STORE_ROUNDS (5),
# STORE_SECONDS (3).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
VERSION="$(sed -nE 's/^project\(ddprun VERSION ([0-9]+\.[0-9]+\.[0-9]+).*/\1/p' "$ROOT/CMakeLists.txt")"
DEBIAN="$(realpath "${1:-$ROOT/build}")"
PORTABLE="$(realpath "${2:-$ROOT/build-portable/stage/ddprun-$VERSION-linux-x86_64}")"
for f in "$DEBIAN"/bin/{ddprun,ddprun-store,output_flooder,store_loadgen} "$PORTABLE"/bin/{ddprun,ddprun-store}; do
  [[ -x "$f" ]] || { echo "portable_vs_debian: $f is missing (see the header of $0)" >&2; exit 2; }
done
echo "# portable ($PORTABLE) vs Debian ($DEBIAN), $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1 /proc/loadavg), $(nproc) cores"
echo
echo "## launcher (bench/launcher/ab_compare.py)"
echo
python3 "$ROOT/bench/launcher/ab_compare.py" "$DEBIAN" "$PORTABLE" --names debian,portable \
  --runs "${RUNS:-100}" --output-runs "${OUTPUT_RUNS:-3}"
echo
echo "## store (bench/store/run_bench.py): \"ddprun-store\" is the portable one, \"baseline build\" the Debian one"
echo
python3 "$ROOT/bench/store/run_bench.py" --build "$DEBIAN" --servers ddprun --parts throughput \
  --ddprun-bin "$PORTABLE/bin/ddprun-store" --baseline-bin "$DEBIAN/bin/ddprun-store" \
  --rounds "${STORE_ROUNDS:-5}" --seconds "${STORE_SECONDS:-3}"
