#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Integration cases of the worker program on real processes (CPU, Gloo). Usage:
#   worker_cases.sh CASE WORKER [DDPRUN]
# CASE: restart | peer_death | agent_store | ddprun_store | env_errors | accuracy
# (ddprun_store takes the ddprun-store program in place of DDPRUN).
# DDPRUN: the launcher to run under; when empty, tests/worker/launch_local.sh stands in (and a
# restart is emulated by rerunning with TORCHELASTIC_RESTART_COUNT=1).
# PYTHON (environment): interpreter with the torch matching the build (for agent_store).
set -u
case_name=$1
worker=$2
ddprun=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d /tmp/ddp-worker-test.XXXXXX)
children=()
cleanup() {
  for pid in "${children[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

launch() {  # launch NPROC ARGS... (under ddprun or the local stand-in)
  local n=$1; shift
  if [ -n "$ddprun" ]; then
    "$ddprun" --nproc_per_node="$n" "$worker" "$@"
  else
    "$here/launch_local.sh" "$n" "$worker" "$@"
  fi
}

case "$case_name" in
restart)
  # A run whose last rank dies after epoch 1, restarted once, ends with exactly the parameters
  # of an uninterrupted run: rank 0's checkpoint carries model, optimizer and progress.
  common=(--synthetic 512 --batch-size 16 --epochs 3 --lr 0.01 --no-eval --seed 3)
  launch 2 "${common[@]}" --checkpoint "$tmp/a/ck.pt" --dump-params "$tmp/uninterrupted" \
    >"$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; fail "uninterrupted run failed"; }
  if [ -n "$ddprun" ]; then
    "$ddprun" --nproc_per_node=2 --max_restarts 1 "$worker" "${common[@]}" --checkpoint "$tmp/b/ck.pt" \
      --dump-params "$tmp/restarted" --fail-after-epoch 1 >"$tmp/b.log" 2>&1 ||
      { cat "$tmp/b.log"; fail "restarted run failed"; }
  else
    "$here/launch_local.sh" 2 "$worker" "${common[@]}" --checkpoint "$tmp/b/ck.pt" \
      --dump-params "$tmp/restarted" --fail-after-epoch 1 >"$tmp/b.log" 2>&1 &&
      fail "the first attempt should have died"
    TORCHELASTIC_RESTART_COUNT=1 "$here/launch_local.sh" 2 "$worker" "${common[@]}" \
      --checkpoint "$tmp/b/ck.pt" --dump-params "$tmp/restarted" >>"$tmp/b.log" 2>&1 ||
      { cat "$tmp/b.log"; fail "restarted run failed"; }
  fi
  grep -q "resumed from $tmp/b/ck.pt after epoch 1" "$tmp/b.log" || { cat "$tmp/b.log"; fail "no resume after epoch 1"; }
  for r in 0 1; do
    cmp "$tmp/uninterrupted.rank$r" "$tmp/restarted.rank$r" || fail "rank $r parameters differ from the uninterrupted run"
  done
  cmp "$tmp/restarted.rank0" "$tmp/restarted.rank1" || fail "ranks disagree after the restart"
  [ "$(ls "$tmp/b")" = "ck.pt" ] || fail "unexpected files next to the checkpoint: $(ls "$tmp/b")"
  echo "restart: resumed after epoch 1, parameters identical to the uninterrupted run"
  ;;
peer_death)
  # Rank 1 is SIGKILLed after epoch 1; rank 0, alone, must fail its next collective and exit
  # non-zero by itself (no launcher here to stop it) and leave the error file.
  port=$("$python" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      TORCHELASTIC_ERROR_FILE="$tmp/error$r.json" OMP_NUM_THREADS=1 \
      "$worker" --synthetic 512 --batch-size 16 --epochs 3 --lr 0.01 --no-eval --timeout 20 \
      --checkpoint "$tmp/ck.pt" --fail-after-epoch 1 >"$tmp/rank$r.log" 2>&1 &
    children+=($!)
  done
  wait "${children[1]}"; rc1=$?
  wait "${children[0]}"; rc0=$?
  children=()
  [ $rc1 -eq 137 ] || { cat "$tmp/rank1.log"; fail "rank 1 should have died by SIGKILL (rc $rc1)"; }
  [ $rc0 -ne 0 ] || { cat "$tmp/rank0.log"; fail "rank 0 exited 0 although its peer died"; }
  [ -s "$tmp/error0.json" ] || { cat "$tmp/rank0.log"; fail "rank 0 wrote no error file"; }
  "$python" - "$tmp/error0.json" <<'PY' || fail "error file is not PyTorch's format"
import json, sys
d = json.load(open(sys.argv[1]))
m = d["message"]
assert m["message"] and isinstance(m["message"], str), m
assert set(m["extraInfo"]) == {"py_callstack", "timestamp"}, m
assert int(m["extraInfo"]["timestamp"]) > 0
print("peer_death: rank 0 failed with:", m["message"][:160])
PY
  # EXPECT_ERROR (environment): the path under test names itself in rank 0's error.
  if [ -n "${EXPECT_ERROR:-}" ]; then
    grep -qF "$EXPECT_ERROR" "$tmp/error0.json" || { cat "$tmp/error0.json"; fail "rank 0's error does not mention '$EXPECT_ERROR'"; }
  fi
  # The shared-memory segment is unlinked once mapped: nothing of this job stays in /dev/shm.
  leftover=$(ls /dev/shm 2>/dev/null | grep -e "-p$port-" || true)
  [ -z "$leftover" ] || fail "left in /dev/shm: $leftover"
  ;;
agent_store)
  # TORCHELASTIC_USE_AGENT_STORE=True: the launcher hosts the store and every rank, 0 included,
  # is a client under /worker/attempt_<n>. A Python c10d TCPStore plays the launcher here.
  "$python" -u - "$tmp/port" <<'PY' &
import sys, time, datetime
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=60), False)
open(sys.argv[1] + ".tmp", "w").write(str(store.port))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
PY
  children+=($!)
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  [ -s "$tmp/port" ] || fail "the Python store did not start"
  MASTER_PORT=$(cat "$tmp/port") TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=2 \
    "$here/launch_local.sh" 2 "$worker" --synthetic 256 --batch-size 16 --epochs 1 --no-eval \
    --checkpoint "$tmp/ck.pt" --timeout 30 >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "run on the agent store failed"; }
  echo "agent_store: 2 ranks trained with the store hosted outside rank 0"
  ;;
ddprun_store)
  # The same with ddprun's own store server (rendezvous/, ddprun-store) hosting the store: the
  # LibTorch TCPStore client of this build must work against it.
  store_bin=$ddprun
  "$store_bin" --port 0 >"$tmp/port" 2>"$tmp/store.log" &
  children+=($!)
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  [ -s "$tmp/port" ] || fail "ddprun-store did not print its port"
  MASTER_PORT=$(head -1 "$tmp/port") TORCHELASTIC_USE_AGENT_STORE=1 TORCHELASTIC_RESTART_COUNT=0 \
    "$here/launch_local.sh" 3 "$worker" --synthetic 256 --batch-size 16 --epochs 1 --no-eval \
    --checkpoint "$tmp/ck.pt" --timeout 30 >"$tmp/log" 2>&1 || { cat "$tmp/log" "$tmp/store.log"; fail "run on ddprun-store failed"; }
  echo "ddprun_store: 3 ranks trained on ddprun's store server"
  ;;
env_errors)
  # A missing or malformed launcher variable is named in one line and gives exit code 2.
  out=$(env -u WORLD_SIZE RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 "$worker" 2>&1); rc=$?
  [ $rc -eq 2 ] && [[ $out == *"WORLD_SIZE is not set"* ]] || fail "missing WORLD_SIZE: rc $rc: $out"
  out=$(RANK=x WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 "$worker" 2>&1); rc=$?
  [ $rc -eq 2 ] && [[ $out == *"RANK='x' is not an integer"* ]] || fail "bad RANK: rc $rc: $out"
  out=$(RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=99999 "$worker" 2>&1); rc=$?
  [ $rc -eq 2 ] && [[ $out == *"MASTER_PORT='99999' is out of range"* ]] || fail "bad port: rc $rc: $out"
  out=$("$worker" --epochs 1 --data "$tmp/nowhere" 2>&1); rc=$?
  [ $rc -eq 1 ] && [[ $out == *"Fashion-MNIST file not found: $tmp/nowhere/train-images-idx3-ubyte.gz"* ]] ||
    fail "missing data: rc $rc: $out"
  # A bad flag is one line and exit code 2; a repeated flag takes its last value (as in ddprun).
  out=$("$worker" --bogus 2>&1); rc=$?
  [ $rc -eq 2 ] && [[ $out == "worker: error: The following argument was not expected: --bogus (see --help)" ]] ||
    fail "bad flag: rc $rc: $out"
  out=$("$worker" --epochs 3 --epochs 1 --data "$tmp/nowhere" 2>&1); rc=$?
  [ $rc -eq 1 ] && [[ $out == *"Fashion-MNIST file not found"* ]] || fail "repeated --epochs: rc $rc: $out"
  echo "env_errors: clear one-line errors"
  ;;
accuracy)
  # The README's main job: 2 ranks, 2 epochs of Fashion-MNIST, at least 88.5% test accuracy.
  [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "no dataset"; exit 77; }
  launch 2 --epochs 2 --checkpoint "$tmp/ck.pt" --summary-json "$tmp/summary.json" 2>&1 | tail -4
  "$python" - "$tmp/summary.json" <<'PY' || fail "accuracy below 88.5%"
import json, sys
s = json.load(open(sys.argv[1]))
print(f"accuracy: {100 * s['test_accuracy']:.2f}% after 2 epochs, {s['samples_per_second']:.0f} samples/s")
sys.exit(0 if s["test_accuracy"] >= 0.885 else 1)
PY
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
