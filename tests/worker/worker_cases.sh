#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Integration cases of the worker program on real processes (CPU, Gloo). Usage:
#   worker_cases.sh CASE WORKER [DDPRUN]
# CASE: restart | peer_death | agent_store | ddprun_store | env_errors | heartbeat | accuracy, and the numbered
# defects of issue 12: foreign_checkpoint (1) | no_shared_fs (2) | save_enospc (3) |
# non_utf8_error (4) | no_local_world_size (5) | stale_files (6) | corrupt_checkpoint (7) |
# help_and_ranges | no_eval_output
# (ddprun_store takes the ddprun-store program in place of DDPRUN).
# DDPRUN: the launcher to run under; when empty, tests/worker/launch_local.sh stands in (and a
# restart is emulated by rerunning with TORCHELASTIC_RESTART_COUNT=1).
# PYTHON (environment): interpreter with the torch matching the build (for agent_store).
set -u
case_name=$1
worker=$2
case $worker in /*) ;; *) worker=$PWD/$worker ;; esac  # cases run it from other directories
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

free_port() { "$python" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# A dead pid: a child that has exited and been reaped.
dead_pid() { sh -c 'echo $$'; }

# solo ARGS...: the worker as a launched world of one (its own store), error file $tmp/error.json.
solo() {
  RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) \
    TORCHELASTIC_ERROR_FILE="$tmp/error.json" OMP_NUM_THREADS=1 "$worker" "$@"
}

# valid_error_file FILE TEXT: PyTorch's error-file JSON whose message contains TEXT.
valid_error_file() {
  "$python" - "$1" "$2" <<'PY'
import json, sys
m = json.load(open(sys.argv[1], encoding="utf-8"))["message"]
assert set(m["extraInfo"]) == {"py_callstack", "timestamp"}, m
assert sys.argv[2] in m["message"], m["message"]
print("error file:", m["message"][:200])
PY
}

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
  # Importing torch can take many seconds on a loaded machine: wait while the store process lives.
  for _ in $(seq 1200); do [ -s "$tmp/port" ] && break; kill -0 "${children[0]}" 2>/dev/null || break; sleep 0.1; done
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
  for _ in $(seq 600); do [ -s "$tmp/port" ] && break; kill -0 "${children[0]}" 2>/dev/null || break; sleep 0.1; done
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
heartbeat)
  # The worker sends "step N" to $DDPRUN_HEARTBEAT_SOCKET once per step: under ddprun with
  # --status-port and --hang-timeout, /status shows each rank's last step advancing (progress
  # source "heartbeat") and the run ends without a hang verdict.
  [ -n "$ddprun" ] || { echo "heartbeat: needs ddprun"; exit 77; }
  "$python" - "$ddprun" "$worker" "$tmp" <<'PY' || fail "heartbeat: see above"
import json, os, subprocess, sys, time, urllib.request
ddprun, worker, tmp = sys.argv[1:4]
events = os.path.join(tmp, "events.jsonl")
log = open(os.path.join(tmp, "hb.log"), "w")
proc = subprocess.Popen([ddprun, "--nproc_per_node=2", "--status-port", "0", "--hang-timeout", "20",
                         "--events", events, worker, "--synthetic", "6000", "--batch-size", "4",
                         "--epochs", "1", "--no-eval", "--checkpoint", os.path.join(tmp, "ck", "ck.pt")],
                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

def read_events():
    try:
        with open(events) as f:
            return [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        return []

try:
    seen = {}  # rank -> last steps seen, in order
    port = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if port is None:
            port = next((e["port"] for e in read_events() if e["event"] == "status"), None)
        if port is not None:
            try:
                st = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5).read())
            except OSError:
                st = None
            if st and st["phase"] == "running":
                for r in st["ranks"]:
                    if r["last_step"] is not None:
                        assert st["progress_source"] == "heartbeat", st
                        steps = seen.setdefault(r["rank"], [])
                        if not steps or steps[-1] != r["last_step"]:
                            steps.append(r["last_step"])
                if len(seen) == 2 and all(len(s) >= 3 for s in seen.values()):
                    break
        time.sleep(0.1)
    print("last steps seen in /status:", {r: s[:5] for r, s in seen.items()})
    assert len(seen) == 2 and all(len(s) >= 3 and s == sorted(s) for s in seen.values()), seen
    rc = proc.wait(timeout=300)
    assert rc == 0, rc
    ev = read_events()
    assert not [e for e in ev if e["event"] in ("hang", "stacks_saved")], ev
finally:
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
        proc.wait()
    log.close()
    if sys.exc_info()[0] is not None:
        print(open(os.path.join(tmp, "hb.log")).read()[-3000:])
PY
  echo "heartbeat: each rank's last step advanced in /status; no hang verdict"
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
foreign_checkpoint)
  # Defect 1: a restart finds a checkpoint another job left (other seed): it must not resume it.
  common=(--synthetic 256 --batch-size 16 --epochs 2 --lr 0.01 --no-eval)
  TORCHELASTIC_RUN_ID=job-a "$here/launch_local.sh" 2 "$worker" "${common[@]}" --seed 3 --checkpoint "$tmp/ck.pt" \
    >"$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; fail "job A failed"; }
  TORCHELASTIC_RUN_ID=job-b "$here/launch_local.sh" 2 "$worker" "${common[@]}" --seed 4 --checkpoint "$tmp/fresh.pt" \
    --dump-params "$tmp/fresh" >"$tmp/fresh.log" 2>&1 || { cat "$tmp/fresh.log"; fail "fresh job B failed"; }
  # Job B, restarted by its launcher (restart count 1), over job A's file.
  TORCHELASTIC_RUN_ID=job-b TORCHELASTIC_RESTART_COUNT=1 "$here/launch_local.sh" 2 "$worker" "${common[@]}" --seed 4 \
    --checkpoint "$tmp/ck.pt" --dump-params "$tmp/b" >"$tmp/b.log" 2>&1 || { cat "$tmp/b.log"; fail "job B failed"; }
  grep -q "resumed" "$tmp/b.log" && { cat "$tmp/b.log"; fail "job B resumed job A's checkpoint"; }
  grep -q "worker: $tmp/ck.pt was written by another job (run id 'job-a' (this job: 'job-b'))" "$tmp/b.log" ||
    { cat "$tmp/b.log"; fail "no one-line notice naming the other job"; }
  grep -q "epoch 2/2:" "$tmp/b.log" || { cat "$tmp/b.log"; fail "job B did not train its epochs"; }
  for r in 0 1; do cmp "$tmp/fresh.rank$r" "$tmp/b.rank$r" || fail "job B's parameters differ from a fresh run"; done
  # --resume continues another run of the same data and model, and refuses another seed's.
  TORCHELASTIC_RUN_ID=job-c "$here/launch_local.sh" 2 "$worker" "${common[@]}" --epochs 3 --seed 4 --checkpoint "$tmp/ck.pt" \
    --resume >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; fail "--resume of job B's checkpoint failed"; }
  grep -q "resumed from $tmp/ck.pt after epoch 2" "$tmp/c.log" || { cat "$tmp/c.log"; fail "--resume did not resume"; }
  TORCHELASTIC_RUN_ID=job-d "$here/launch_local.sh" 2 "$worker" "${common[@]}" --seed 5 --checkpoint "$tmp/ck.pt" \
    --resume >"$tmp/d.log" 2>&1 && { cat "$tmp/d.log"; fail "--resume accepted another seed's checkpoint"; }
  grep -q "worker: error: ddp::worker::CheckpointError: --resume: $tmp/ck.pt does not belong to this job: data" "$tmp/d.log" ||
    { cat "$tmp/d.log"; fail "no one-line --resume refusal"; }
  echo "foreign_checkpoint: another job's checkpoint ignored on restart (one line), --resume explicit"
  ;;
no_shared_fs)
  # Defect 2: two "nodes" without a shared filesystem (each rank its own directory, LOCAL_WORLD_SIZE=1).
  # After a restart only rank 0 has the checkpoint; every rank must resume it, bit-identical to an
  # uninterrupted run.
  nodes() {  # nodes RESTART_COUNT DIR_PREFIX ARGS...
    local restart=$1 prefix=$2; shift 2
    local port pids=() rc=0
    port=$(free_port)
    for r in 0 1; do
      mkdir -p "$prefix$r"
      (cd "$prefix$r" && RANK=$r LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        TORCHELASTIC_RUN_ID=job-nfs TORCHELASTIC_RESTART_COUNT=$restart OMP_NUM_THREADS=1 \
        exec "$worker" "$@" >"$prefix$r.attempt$restart.log" 2>&1) &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    return $rc
  }
  common=(--synthetic 512 --batch-size 16 --epochs 3 --lr 0.01 --no-eval --seed 3 --checkpoint ck.pt --timeout 30)
  nodes 0 "$tmp/whole" "${common[@]}" --dump-params "$tmp/uninterrupted" || { cat "$tmp"/whole*.log; fail "uninterrupted run failed"; }
  nodes 0 "$tmp/node" "${common[@]}" --fail-after-epoch 1 && fail "the first attempt should have died"
  [ -f "$tmp/node0/ck.pt" ] && [ ! -e "$tmp/node1/ck.pt" ] || fail "expected the checkpoint on node 0 only"
  nodes 1 "$tmp/node" "${common[@]}" --dump-params "$tmp/restarted" || { cat "$tmp"/node*.attempt1.log; fail "restarted run failed"; }
  grep -q "resumed from ck.pt after epoch 1" "$tmp/node0.attempt1.log" || { cat "$tmp/node0.attempt1.log"; fail "no resume after epoch 1"; }
  for r in 0 1; do
    cmp "$tmp/uninterrupted.rank$r" "$tmp/restarted.rank$r" || fail "rank $r parameters differ from the uninterrupted run"
  done
  [ ! -e "$tmp/node1/ck.pt" ] || fail "rank 1 wrote a checkpoint"
  echo "no_shared_fs: both ranks resumed rank 0's checkpoint; parameters identical to the uninterrupted run"
  ;;
save_enospc)
  # Defect 3: the checkpoint directory is a full filesystem (a 64 KiB tmpfs in a mount namespace).
  mkdir -p "$tmp/full"
  unshare -m bash -c 'mount --make-rprivate / && mount -t tmpfs -o size=64k tmpfs "$1" || exit 99
    RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$3 \
      TORCHELASTIC_ERROR_FILE="$2/error.json" OMP_NUM_THREADS=1 \
      "$4" --synthetic 256 --batch-size 16 --epochs 1 --no-eval --checkpoint "$1/ck.pt" >"$2/out.log" 2>"$2/err.log"
    rc=$?; ls -A "$1" >"$2/left.txt"; exit $rc' bash "$tmp/full" "$tmp" "$(free_port)" "$worker"
  rc=$?
  [ $rc -ne 99 ] || { echo "cannot mount a tmpfs here"; exit 77; }
  [ $rc -eq 1 ] || { cat "$tmp/out.log" "$tmp/err.log"; fail "expected exit code 1, got $rc"; }
  [ "$(grep -c . "$tmp/err.log")" -eq 1 ] || { cat "$tmp/err.log"; fail "expected one stderr line"; }
  grep -q "^worker: error: ddp::worker::CheckpointError: cannot write checkpoint $tmp/full/ck.pt: .*No space left on device (ENOSPC)$" "$tmp/err.log" ||
    { cat "$tmp/err.log"; fail "unexpected error line"; }
  valid_error_file "$tmp/error.json" "No space left on device" || fail "no valid error file"
  [ ! -s "$tmp/left.txt" ] || fail "left on the full filesystem: $(cat "$tmp/left.txt")"
  echo "save_enospc: one line, exit 1, error file, temp file removed"
  ;;
non_utf8_error)
  # Defect 4: an error message carrying a byte that is not UTF-8 (a Latin-1 data path).
  bad=$(printf '%s/caf\xe9' "$tmp")
  solo --epochs 1 --data "$bad" >"$tmp/out.log" 2>&1; rc=$?
  [ $rc -eq 1 ] || { cat "$tmp/out.log"; fail "expected exit code 1, got $rc"; }
  valid_error_file "$tmp/error.json" 'caf\xe9/train-images-idx3-ubyte.gz' || fail "no valid error file"
  echo "non_utf8_error: exit 1 and a valid error file"
  ;;
no_local_world_size)
  # Defect 5: ranks started without LOCAL_WORLD_SIZE (one pod per rank), rank 1 on "another host"
  # (a /dev/shm of its own): no shared memory, training completes.
  two_hosts() {  # two_hosts LOG_PREFIX [LOCAL_WORLD_SIZE]
    local prefix=$1 lws=${2:-} port pids=() rc=0
    port=$(free_port)
    for r in 0 1; do
      local cmd=(env RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1)
      [ -n "$lws" ] && cmd+=(LOCAL_WORLD_SIZE=$lws LOCAL_RANK=$r)
      cmd+=("$worker" --synthetic 256 --batch-size 16 --epochs 1 --no-eval --timeout 60 --checkpoint "$tmp/ck$r.pt")
      if [ $r -eq 1 ]; then
        unshare -m sh -c 'mount --make-rprivate / && mount -t tmpfs -o size=4m tmpfs /dev/shm && exec "$@"' sh "${cmd[@]}" \
          >"$prefix$r.log" 2>&1 &
      else
        "${cmd[@]}" >"$prefix$r.log" 2>&1 &
      fi
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    return $rc
  }
  unshare -m true 2>/dev/null || { echo "no mount namespaces here (needs root)"; exit 77; }
  two_hosts "$tmp/unset" || { cat "$tmp"/unset*.log; fail "the job failed without LOCAL_WORLD_SIZE"; }
  grep -q "backend gloo," "$tmp/unset0.log" || { cat "$tmp/unset0.log"; fail "expected plain gloo without LOCAL_WORLD_SIZE"; }
  # LOCAL_WORLD_SIZE claims one host but rank 1 cannot map the segment: every rank falls back at once.
  two_hosts "$tmp/lying" 2 || { cat "$tmp"/lying*.log; fail "the job failed when rank 1 could not map the segment"; }
  grep -q "worker: shared-memory all-reduce unavailable: rank 1: shm_open" "$tmp/lying0.log" ||
    { cat "$tmp/lying0.log"; fail "rank 0 did not say why it fell back"; }
  echo "no_local_world_size: shared memory only on the launcher's word; a rank that cannot map it falls back"
  ;;
stale_files)
  # Defect 6: what killed runs left (a checkpoint temp file, a shared-memory segment) is
  # reclaimed at the next start; a live writer's temp file is kept.
  host=$(hostname); dead=$(dead_pid)
  ns=$(readlink /proc/self/ns/pid | tr -dc 0-9)
  mkdir -p "$tmp/ck"
  touch "$tmp/ck/ck.pt.tmp.$host.$dead" "$tmp/ck/ck.pt.tmp.$dead" "$tmp/ck/ck.pt.tmp.$host.$$"
  segment=/dev/shm/ddprun-none-r0-p1-$ns-$dead-42
  : >"$segment"
  launch 2 --synthetic 256 --batch-size 16 --epochs 1 --no-eval --checkpoint "$tmp/ck/ck.pt" >"$tmp/log" 2>&1 ||
    { rm -f "$segment"; cat "$tmp/log"; fail "run failed"; }
  left=$(cd "$tmp/ck" && ls | sort | tr '\n' ' ')
  [ -e "$segment" ] && { rm -f "$segment"; fail "stale shared-memory segment not reclaimed"; }
  [ "$left" = "ck.pt ck.pt.tmp.$host.$$ " ] || fail "unexpected files next to the checkpoint: $left"
  echo "stale_files: dead writers' temp files and segment reclaimed, the live one kept"
  ;;
corrupt_checkpoint)
  # Defect 7: a checkpoint whose checksum fails must not load.
  common=(--synthetic 256 --batch-size 16 --lr 0.01 --no-eval --seed 3 --checkpoint "$tmp/ck.pt")
  "$here/launch_local.sh" 2 "$worker" "${common[@]}" --epochs 1 >"$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; fail "first run failed"; }
  "$python" - "$tmp/ck.pt" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[len(data) // 2] ^= 0x01  # one bit, in the middle of the weights
open(sys.argv[1], "wb").write(bytes(data))
PY
  TORCHELASTIC_RESTART_COUNT=1 "$here/launch_local.sh" 2 "$worker" "${common[@]}" --epochs 2 >"$tmp/b.log" 2>&1 &&
    { cat "$tmp/b.log"; fail "the restart resumed a corrupt checkpoint"; }
  grep -q "resumed" "$tmp/b.log" && { cat "$tmp/b.log"; fail "the restart resumed a corrupt checkpoint"; }
  grep -q "worker: error: ddp::worker::CheckpointError: $tmp/ck.pt is corrupt: checksum mismatch" "$tmp/b.log" ||
    { cat "$tmp/b.log"; fail "no one-line checksum error"; }
  TORCHELASTIC_RESTART_COUNT=1 "$here/launch_local.sh" 2 "$worker" "${common[@]}" --epochs 1 --no-resume >"$tmp/c.log" 2>&1 ||
    { cat "$tmp/c.log"; fail "--no-resume did not start from scratch"; }
  echo "corrupt_checkpoint: refused with one line; --no-resume starts over"
  ;;
help_and_ranges)
  help=$("$worker" --help 2>&1) || fail "--help failed"
  for hidden in --dump-params --fail-after-epoch; do
    [[ $help != *"$hidden"* ]] || fail "--help shows the test-only flag $hidden"
  done
  for shown in --epochs --checkpoint --resume --no-resume --no-eval; do
    [[ $help == *"$shown"* ]] || fail "--help lacks $shown"
  done
  check_range() {  # check_range EXPECTED-LINE ARGS...
    local want=$1; shift
    out=$("$worker" "$@" 2>&1); rc=$?
    [ $rc -eq 2 ] && [ "$out" = "$want" ] || fail "$*: rc $rc: $out"
  }
  check_range "worker: error: --epochs: must be at least 1 (got 0) (see --help)" --epochs 0
  check_range "worker: error: --batch-size: must be at least 1 (got -3) (see --help)" --batch-size -3
  check_range "worker: error: --lr: must be greater than 0 (got 0) (see --help)" --lr 0
  check_range "worker: error: --timeout: 'x' is not a number (see --help)" --timeout x
  check_range "worker: error: --resume excludes --no-resume (see --help)" --resume --no-resume
  echo "help_and_ranges: user flags only, readable range errors"
  ;;
no_eval_output)
  # --no-eval prints no accuracy; the overlap figure appears only where it is measured (Gloo).
  common=(--synthetic 256 --batch-size 16 --epochs 1 --no-eval --checkpoint "$tmp/ck.pt")
  "$here/launch_local.sh" 2 "$worker" "${common[@]}" >"$tmp/shm.log" 2>&1 || { cat "$tmp/shm.log"; fail "run failed"; }
  grep -q "accuracy" "$tmp/shm.log" && { cat "$tmp/shm.log"; fail "--no-eval printed an accuracy"; }
  grep -q "backend gloo+shm" "$tmp/shm.log" || { cat "$tmp/shm.log"; fail "expected the shared-memory path"; }
  grep -q "hidden behind backward" "$tmp/shm.log" && { cat "$tmp/shm.log"; fail "overlap printed for synchronous reductions"; }
  "$here/launch_local.sh" 2 "$worker" "${common[@]}" --no-shm >"$tmp/gloo.log" 2>&1 || { cat "$tmp/gloo.log"; fail "run failed"; }
  grep -q "% hidden behind backward" "$tmp/gloo.log" || { cat "$tmp/gloo.log"; fail "no overlap figure on gloo"; }
  echo "no_eval_output: no accuracy line; overlap only on the gloo path"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
