#!/usr/bin/env bash
# Configures and builds everything into build/ (executables in build/bin/): tests and benchmarks
# included. Assumes scripts/setup.sh ran. Extra arguments go to `cmake --build`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${DDPRUN_JOBS:-$(nproc)}"
# Given on every run: a build/ that scripts/demo.sh configured without tests gets them here.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DBUILD_TESTING=ON -DDDPRUN_BUILD_BENCH=ON -DDDPRUN_INSTALL_DOCS=ON >/dev/null
cmake --build build -j"$JOBS" "$@"
