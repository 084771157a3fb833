#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Training throughput of the C++ worker against the Python DDP baseline (ddp_baseline.py: same
# CNN, data, batch 64 per rank, SGD, gloo), both under ddprun with 2 ranks and alone in one
# process with one thread; the C++ worker with SyncBatchNorm (the main job) and without (the
# like-for-like comparison, since PyTorch's SyncBatchNorm cannot run on CPU). Also the share of
# all-reduce time hidden behind backward, measured by the worker (default 25 MB buckets: one
# bucket for this 83 KB model; and 16 KiB buckets, so that overlap is possible). All ranks are
# local, so the worker's small all-reduces go through shared memory unless --no-shm (a row of
# its own: the SyncBatchNorm job over Gloo only).
# Runs are interleaved and repeated; the table shows medians. Usage:
#   bench/train/run.sh [BUILD_DIR] [REPEATS] [STEPS]      (defaults: build, 3, 300)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
repeats=${2:-3}
steps=${3:-300}
ddprun="$build/bin/ddprun"
worker="$build/bin/worker"
python=/usr/bin/python3
tmp=$(mktemp -d /tmp/ddp-bench-train.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for f in "$ddprun" "$worker"; do [ -x "$f" ] || { echo "missing $f (build the ddprun and worker targets)" >&2; exit 1; }; done

run() {  # run NAME NPROC PROGRAM ARGS...  -> appends samples/s (and overlap) to $tmp/NAME
  local name=$1 n=$2; shift 2
  local json="$tmp/$name.json"
  rm -f "$json"
  if [ "$n" -eq 1 ]; then
    OMP_NUM_THREADS=1 "$@" --summary-json "$json" >"$tmp/$name.log" 2>&1
  else
    OMP_NUM_THREADS=1 "$ddprun" --nproc_per_node="$n" "$@" --summary-json "$json" >"$tmp/$name.log" 2>&1
  fi || { cat "$tmp/$name.log" >&2; exit 1; }
  "$python" -c 'import json,sys; s=json.load(open(sys.argv[1])); o=s.get("overlap_fraction"); print(s["samples_per_second"], "-" if o is None else o, s["cpu_ms_per_1k_samples_per_rank"])' "$json" >>"$tmp/$name"
}

common=(--epochs 1 --max-steps "$steps")
cpp=("$worker" "${common[@]}" --no-eval --checkpoint "$tmp/ck.pt")
py=("$python" bench/train/ddp_baseline.py "${common[@]}")
for ((i = 0; i < repeats; i++)); do
  run py_ddp 2 "${py[@]}"
  run cpp_ddp_syncbn 2 "${cpp[@]}"
  run cpp_ddp_syncbn_gloo 2 "${cpp[@]}" --no-shm
  run cpp_ddp 2 "${cpp[@]}" --no-sync-bn
  run cpp_ddp_16k 2 "${cpp[@]}" --no-sync-bn --bucket-kb 16
  run py_single 1 "${py[@]}"
  run cpp_single 1 "${cpp[@]}" --no-sync-bn
done

"$python" - "$tmp" "$repeats" "$steps" <<'PY'
import statistics, sys
tmp, repeats, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rows(name):
    return [[None if v == "-" else float(v) for v in line.split()] for line in open(f"{tmp}/{name}")]
def med(name, col=0):
    vals = [r[col] for r in rows(name) if len(r) > col and r[col] is not None]
    return statistics.median(vals) if vals else None
py2, py1, cpp1 = med("py_ddp"), med("py_single"), med("cpp_single")
print(f"2 ranks under ddprun, batch 64 per rank, {steps} steps, gloo, OMP_NUM_THREADS=1; median of {repeats}")
print()
print("| configuration | samples/s | vs Python DDP | scaling efficiency | all-reduce hidden behind backward | CPU ms per 1k samples per rank |")
print("|---|---|---|---|---|---|")
def line(label, name, single):
    v = med(name)
    ov = med(name, 1)
    eff = f"{100 * v / (2 * single):.0f}%" if single else ""
    # None: the run's reductions were synchronous (shared memory), so overlap is not measured.
    ovs = f"{100 * ov:.0f}%" if ov is not None and name.startswith("cpp") else "n/a"
    print(f"| {label} | {v:,.0f} | {v / py2:.2f}x | {eff} | {ovs} | {med(name, 2):.0f} |")
line("Python DDP (ddp_baseline.py, BatchNorm)", "py_ddp", py1)
line("C++ worker, SyncBatchNorm (main job; small all-reduces via shared memory)", "cpp_ddp_syncbn", cpp1)
line("C++ worker, SyncBatchNorm, all-reduces over Gloo only (--no-shm)", "cpp_ddp_syncbn_gloo", cpp1)
line("C++ worker, BatchNorm (like for like)", "cpp_ddp", cpp1)
line("C++ worker, BatchNorm, 16 KiB buckets", "cpp_ddp_16k", cpp1)
print(f"| Python, 1 process, 1 thread | {py1:,.0f} | | | | {med('py_single', 2):.0f} |")
print(f"| C++, 1 process, 1 thread | {cpp1:,.0f} | | | | {med('cpp_single', 2):.0f} |")
print()
print("Scaling efficiency: 2-rank samples/s over twice the same program's one-process samples/s.")
print("CPU ms per 1k samples: rank 0's user+system CPU time (all its threads) during training,")
print("much less sensitive than samples/s to other load on the machine.")
PY
