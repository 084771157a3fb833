#!/usr/bin/env bash
# The main job, from a fresh clone: installs only what it needs (scripts/setup.sh --minimal), builds
# only `ddprun` and the `worker`, and trains the Fashion-MNIST CNN with 2 CPU processes under ddprun
# (Gloo), 2 epochs (the worker's default). Extra arguments go to the worker (e.g. --epochs 1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${DDPRUN_JOBS:-$(nproc)}"
scripts/setup.sh --minimal
# Ninja for new build trees (an existing tree keeps its generator): it schedules the unity
# units of several targets better than make (docs/packaging.md#the-first-run).
if command -v ninja >/dev/null; then export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"; fi
if [[ ! -f build/CMakeCache.txt ]]; then
  # No tests, benchmarks or man pages: the demo needs two programs (scripts/test.sh turns tests on).
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DDDPRUN_INSTALL_DOCS=OFF >/dev/null
fi
cmake --build build --target ddprun worker -j"$JOBS"
exec build/bin/ddprun --nproc_per_node=2 build/bin/worker "$@"
