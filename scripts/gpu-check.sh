#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# GPU checks in one go, for a machine with NVIDIA GPUs (none exist on the CI machines):
#   1. configure + build with the CUDA LibTorch of the python3 on PATH (torch 2.x wheel):
#      ddprun, the worker (NCCL process group) and nccl_allreduce;
#   2. nccl_allreduce under ddprun, one rank per visible GPU (bus bandwidth table);
#   3. the worker on NCCL under ddprun (one rank per GPU), one epoch, with its summary JSON.
# Results go to $OUT (default ./gpu-check-out). Usage: scripts/gpu-check.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
log() { echo "gpu-check: $*" | tee -a "$out/gpu-check.log"; }

command -v nvidia-smi >/dev/null || { log "no nvidia-smi: not a GPU machine"; exit 77; }
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$out/gpus.csv"
nvidia-smi topo -m > "$out/topology.txt" 2>&1 || true
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
log "$gpus GPU(s)"

torch_cmake=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
python3 -c 'import torch; assert torch.version.cuda, "python3 torch is not a CUDA build"; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/gpu-check.log"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
# The torch wheel's CMake config must not pick Debian's libtorch/libc10 from /usr/lib (hence
# CMAKE_PREFIX_PATH) and must not probe GPUs with a CUDA try_run (hence TORCH_CUDA_ARCH_LIST).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_cmake/Torch" \
  -DCMAKE_PREFIX_PATH="$torch_cmake/../..;$torch_cmake" -DTORCH_CUDA_ARCH_LIST="${arch:-9.0}" \
  > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
grep -q 'worker builds its NCCL process group' "$out/configure.log" || { log "worker has no NCCL path"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target ddprun worker nccl_allreduce > "$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
log "built ddprun, worker, nccl_allreduce"

log "nccl_allreduce, $gpus rank(s)"
"$build/bin/ddprun" --nproc_per_node="$gpus" "$build/bin/nccl_allreduce" --max-bytes $((1 << 30)) \
  2>&1 | tee "$out/nccl_allreduce.txt"

data_flags=(--synthetic 60000)
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && data_flags=()
log "worker on NCCL, $gpus rank(s), 1 epoch ${data_flags[*]}"
"$build/bin/ddprun" --nproc_per_node="$gpus" "$build/bin/worker" --backend nccl --epochs 2 \
  "${data_flags[@]}" --checkpoint "$out/worker.pt" --summary-json "$out/worker_nccl.json" \
  2>&1 | tee "$out/worker_nccl.txt"
grep -q 'backend nccl, device cuda:0' "$out/worker_nccl.txt" || { log "worker did not run on NCCL"; exit 1; }
for b in 256 1024 4096; do
  "$build/bin/ddprun" --nproc_per_node="$gpus" "$build/bin/worker" --backend nccl --epochs 1 \
    --batch-size "$b" --no-eval "${data_flags[@]}" --checkpoint "$out/worker_b$b.pt" \
    --summary-json "$out/worker_nccl_b$b.json" 2>&1 | tail -1 | tee -a "$out/gpu-check.log"
done
log "done; results in $out"
