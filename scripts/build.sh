#!/usr/bin/env bash
# Configures and builds ddprun into build/ (executables in build/bin/). Assumes scripts/setup.sh ran.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${DDPRUN_JOBS:-$(nproc)}"
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
fi
cmake --build build -j"$JOBS" "$@"
