#!/usr/bin/env bash
# Starts N copies of a command with the launcher's environment (RANK, LOCAL_RANK, WORLD_SIZE,
# LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), as ddprun/torchrun would on one
# node with rank 0 hosting the store; waits for all and exits with the first non-zero status.
# Usage: launch_local.sh N command [args...]   (MASTER_PORT: a free port unless set)
set -u
n=$1; shift
port=${MASTER_PORT:-$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null' EXIT INT TERM
for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    TORCHELASTIC_RESTART_COUNT=${TORCHELASTIC_RESTART_COUNT:-0} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} \
    "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid"; rc=$?
  if [ $rc -ne 0 ] && [ $status -eq 0 ]; then status=$rc; fi
done
trap - EXIT
exit $status
