#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The worker library as an installed CMake package, used the way a separate project would:
#   cmake --install BUILD --prefix P
#   configure examples/consumer with CMAKE_PREFIX_PATH=P: find_package(ddprun REQUIRED COMPONENTS worker)
#   run the consumer under P/bin/ddprun (the installed launcher), 2 ranks, and check its output.
# Usage: consumer_package.sh BUILD_DIR CONSUMER_SOURCE [EXTRA_PREFIX_PATH] [BUILD_TREE_DDPRUN]
set -u
build=$1
source_dir=$2
extra_prefix=${3:-}
build_ddprun=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/ddp-consumer-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "cmake --install failed"; }
for f in include/ddprun/worker/communicator.hpp include/ddprun/worker/ddp.hpp lib/cmake/ddprun/ddprunConfig.cmake \
         lib/cmake/ddprun/ddprunConfigVersion.cmake lib/cmake/ddprun/ddprunWorkerTargets.cmake; do
  [ -f "$prefix/$f" ] || fail "not installed: $f"
done
ls "$prefix"/lib/libddprun_worker.so* >/dev/null 2>&1 || fail "not installed: lib/libddprun_worker.so"

launcher=()
[ -n "$(command -v ccache)" ] && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$source_dir" -B "$tmp/consumer" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  "-DCMAKE_PREFIX_PATH=$prefix${extra_prefix:+;$extra_prefix}" >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log"; fail "configuring the consumer against the installed package failed"; }
cmake --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "building the consumer failed"; }

# The installed ddprun when this build installs it; until the top-level install rules are in,
# the build tree's (said so in the log).
if [ -x "$prefix/bin/ddprun" ]; then
  ddprun=$prefix/bin/ddprun
elif [ -n "$build_ddprun" ]; then
  ddprun=$build_ddprun
  echo "note: this build installs no bin/ddprun; running under $ddprun"
else
  fail "no ddprun to run the consumer under"
fi
"$ddprun" --nproc_per_node=2 "$tmp/consumer/consumer" "$tmp/ck.pt" >"$tmp/run.log" 2>&1 ||
  { cat "$tmp/run.log"; fail "the consumer failed under $ddprun"; }
grep -q "consumer: 2 ranks, backend gloo+shm, 1 SyncBatchNorm layers, losses .*; ok" "$tmp/run.log" ||
  { cat "$tmp/run.log"; fail "unexpected consumer output"; }
head -c 18 "$tmp/ck.pt" | grep -q "DDPRUN-CHECKPOINT" || fail "the consumer's checkpoint is not a ddprun checkpoint"
grep "consumer:" "$tmp/run.log"
echo "consumer_package: built against $prefix, ran under $ddprun"
