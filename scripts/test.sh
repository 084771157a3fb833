#!/usr/bin/env bash
# Installs what is missing, checks the formatting (clang-format), builds everything and runs every
# test (ctest). CI runs exactly this.
#   scripts/test.sh            all tests
#   scripts/test.sh -L unit    extra arguments go to ctest
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# ccache keys on absolute paths (the unity files include each source by its full path): with the
# clone's root as its base directory, a clone in another folder (CI's fresh clone) hits the entries
# an earlier clone made on this machine (docs/testing.md#the-test-command).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}" CCACHE_NOHASHDIR=1
JOBS="${DDPRUN_JOBS:-$(nproc)}"
# Twice as many test slots as cores: most cases wait on heartbeats, timeouts and other processes;
# those that keep cores busy (torch ranks, compiles) take two slots each (cmake/test_weights.cmake).
TEST_JOBS="${DDPRUN_TEST_JOBS:-$((JOBS * 2))}"

scripts/setup.sh
# Ninja for new build trees (an existing tree keeps its generator): it schedules the unity
# units of several targets better than make (docs/packaging.md#the-first-run).
if command -v ninja >/dev/null; then export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"; fi
# Style first (seconds): a file clang-format would change fails the run before anything is built.
# clang-tidy is not run here; see docs/testing.md#style-checks for why and when to run it.
scripts/lint.sh --format-only || { echo "test: lint failed (an include that points up, or a file clang-format would change: see above)" >&2; exit 1; }
scripts/build.sh

# Second LibTorch: the CUDA build inside torch 2.x from PyPI. The worker compiles and links its NCCL path
# against it (when the CUDA toolkit is found) and runs its Gloo tests on CPU.
TORCH2_DIR="$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)"
if [[ -n "$TORCH2_DIR" && -d "$TORCH2_DIR/Torch" && "${DDPRUN_SKIP_TORCH2:-0}" != 1 ]]; then
  # CMAKE_PREFIX_PATH keeps Caffe2/Torch from falling back to Debian's 1.13 config files; the arch list
  # skips the GPU probe that fails on a machine without one.
  cmake -S . -B build-torch2 -DCMAKE_BUILD_TYPE=Release -DDDPRUN_TORCH_ONLY=ON \
    -DTorch_DIR="$TORCH2_DIR/Torch" -DCMAKE_PREFIX_PATH="$TORCH2_DIR/../..;$TORCH2_DIR" \
    -DTORCH_CUDA_ARCH_LIST=9.0 -DDDPRUN_TEST_LAUNCHER="$ROOT/build/bin/ddprun" \
    $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) >/dev/null
  cmake --build build-torch2 -j"$JOBS"
fi

status=0
(cd build && ctest --output-on-failure --timeout 600 -j"$TEST_JOBS" "$@") || status=$?
if [[ -d build-torch2 && "${DDPRUN_SKIP_TORCH2:-0}" != 1 ]]; then
  (cd build-torch2 && ctest --output-on-failure --timeout 600 -j"$TEST_JOBS" -L torch2 "$@") || status=$?
fi
exit $status
