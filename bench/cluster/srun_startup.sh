#!/usr/bin/env bash
# Time from `srun` to all workers running, ddprun vs torchrun 1.13 (Debian, shimmed), under a
# private local Slurm (scripts/cluster/slurm-up.sh). Prints a table (milliseconds).
#
#   bench/cluster/srun_startup.sh [BUILD_DIR] [REPEATS]        (defaults: build, 7)
#
# Layouts: 1x2 = srun -N1, one launcher starting 2 workers; 2x1 = srun -N2 --ntasks-per-node=1,
# one launcher per node, 1 worker each (ddprun with no node flags; torchrun given
# --nnodes/--node_rank/--master_addr/--master_port from SLURM_* by a shell wrapper, as users do).
# The worker (mark_started.sh) writes its start time and exits. "start" = last worker's start time
# minus the moment before srun; "done" = srun's wall time. Every worker must see
# WORLD_SIZE = nodes x nproc; a launcher that fails that (e.g. ddprun before its multi-node support,
# which runs two separate 1-node jobs) shows "failed". torchrun runs with its defaults
# (monitor interval 5 s in 1.13, which dominates the "done" column).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
REPEATS="${2:-7}"
DDPRUN="$BUILD/bin/ddprun"
PY=/usr/bin/python3
SHIM="$ROOT/bench/launcher/torchrun113_shim.py"
WORKER="$ROOT/bench/cluster/mark_started.sh"
[[ -x "$DDPRUN" ]] || { echo "no $DDPRUN; build first" >&2; exit 2; }

WORK="$(mktemp -d /tmp/ddp-bench-cluster.XXXXXX)"
chmod 755 "$WORK"
trap '"$ROOT/scripts/cluster/slurm-down.sh" "$WORK/cluster" >/dev/null 2>&1; rm -rf "$WORK"' EXIT
"$ROOT/scripts/cluster/slurm-up.sh" "$WORK/cluster" multi >/dev/null
export SLURM_CONF="$WORK/cluster/etc/slurm.conf"
export BENCH_OUT="$WORK/out"

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# run_once LAUNCHER LAYOUT -> prints "start_ms done_ms" or "failed"
run_once() {
  local launcher=$1 layout=$2 port cmd nodes nproc t0 t1
  rm -rf "$BENCH_OUT"; mkdir -p "$BENCH_OUT"
  port="$(free_port)"
  if [[ $layout == 1x2 ]]; then nodes=1; nproc=2; else nodes=2; nproc=1; fi
  if [[ $launcher == ddprun ]]; then
    cmd=("$DDPRUN" --nproc_per_node=$nproc "$WORKER")
    [[ $layout == 1x2 ]] && cmd=("$DDPRUN" --nproc_per_node=$nproc --master_port=$port "$WORKER")
  else
    cmd=(bash -c "exec $PY $SHIM --nnodes=$nodes --node_rank=\$SLURM_NODEID --master_addr=127.0.0.1 \
      --master_port=$port --nproc_per_node=$nproc --no_python $WORKER")
  fi
  t0=$(date +%s%N)
  if ! timeout 120 srun -N$nodes --ntasks-per-node=1 "${cmd[@]}" >"$WORK/last.log" 2>&1; then
    echo failed; return
  fi
  t1=$(date +%s%N)
  local count last
  # One job: every worker saw the whole world size (two single-node jobs would not count).
  count=$(ls "$BENCH_OUT" | grep -c -- "-of-$((nodes * nproc))-" || true)
  (( count == nodes * nproc )) || { echo failed; return; }
  last=$(cat "$BENCH_OUT"/started-* | sort -n | tail -1)
  echo "$(( (last - t0) / 1000000 )) $(( (t1 - t0) / 1000000 ))"
}

summary() {  # median and min of the first / second column of stdin lines
  "$PY" -c '
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
if not rows or any(r == ["failed"] for r in rows): print("failed | -"); sys.exit()
s = [int(r[0]) for r in rows]; d = [int(r[1]) for r in rows]
print(f"{statistics.median(s):.0f} (min {min(s)}) | {statistics.median(d):.0f} (min {min(d)})")'
}

echo "srun -> all workers running, local Slurm (2 slurmd on one host), $REPEATS runs each, median (min), ms"
echo
echo "| layout | launcher | srun -> all workers started | srun -> srun returned |"
echo "|---|---|---|---|"
for layout in 1x2 2x1; do
  for launcher in ddprun torchrun-1.13; do
    run_once "$launcher" "$layout" >/dev/null  # warm-up (page cache, Python imports)
    results="$(for _ in $(seq "$REPEATS"); do run_once "$launcher" "$layout"; done)"
    echo "| $layout | $launcher | $(echo "$results" | summary | sed 's/ | / | /') |"
  done
done
