#!/usr/bin/env bash
# Configures and builds everything into build/ (executables in build/bin/): tests and benchmarks
# included. Assumes scripts/setup.sh ran. Extra arguments go to `cmake --build`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# ccache keys on absolute paths (the unity files include each source by its full path): with the
# clone's root as its base directory, a clone in another folder (CI's fresh clone) hits the entries
# an earlier clone made on this machine (docs/testing.md#the-test-command).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}" CCACHE_NOHASHDIR=1
JOBS="${DDPRUN_JOBS:-$(nproc)}"
# Ninja for new build trees (an existing tree keeps its generator): it schedules the unity
# units of several targets better than make (docs/packaging.md#the-first-run).
if command -v ninja >/dev/null; then export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"; fi
# Given on every run: a build/ that scripts/demo.sh configured without tests gets them here.
# Through ccache when it is installed (scripts/setup.sh installs it): the packaging tests' builds
# take the same launcher, and a machine that keeps its cache (CI's, a developer's) recompiles
# only what changed, whatever the build directory.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DBUILD_TESTING=ON -DDDPRUN_BUILD_BENCH=ON -DDDPRUN_INSTALL_DOCS=ON "${launcher[@]}" >/dev/null
cmake --build build -j"$JOBS" "$@"
