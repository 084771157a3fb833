# Helpers for the cluster tests (sourced by run_cluster_test.sh). Bash, set -euo pipefail.
# A test calls cluster_up; an EXIT trap always tears the cluster down and removes the temp dir.

SKIP=77  # ctest SKIP_RETURN_CODE

: "${DDP_SOURCE_DIR:?DDP_SOURCE_DIR must point at the repository}"
: "${DDP_BIN_DIR:?DDP_BIN_DIR must point at <build>/bin}"
PY=/usr/bin/python3  # Debian's interpreter: the one with torch 1.13
WORK="$(mktemp -d /tmp/ddp-cluster-test.XXXXXX)"
chmod 755 "$WORK"
CLUSTER=""

cleanup() {
  local rc=$?
  if [[ -n "$CLUSTER" ]]; then
    if [[ $rc -ne 0 && $rc -ne $SKIP ]]; then
      echo "--- slurmctld.log (tail) ---" >&2; tail -n 20 "$CLUSTER/log/slurmctld.log" >&2 2>/dev/null || true
    fi
    "$DDP_SOURCE_DIR/scripts/cluster/slurm-down.sh" "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit $SKIP; }

require_tools() {
  local t
  for t in "$@"; do command -v "$t" >/dev/null || skip "$t is not installed (apt-get install slurm-wlm munge openmpi-bin)"; done
}

# cluster_up [multi|netns]: private Slurm with nodes n1,n2 (or node1,node2), SLURM_CONF exported.
cluster_up() {
  require_tools munged mungekey slurmctld slurmd srun sbatch
  CLUSTER="$WORK/cluster"
  # Watchdog in its own session: if this script is SIGKILLed (e.g. by a ctest timeout) and its EXIT
  # trap never runs, the watchdog still stops the daemons (which setsid put out of ctest's reach).
  setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
                  "$2/scripts/cluster/slurm-down.sh" "$3"; rm -rf "$4"' \
    watchdog "$$" "$DDP_SOURCE_DIR" "$CLUSTER" "$WORK" </dev/null >/dev/null 2>&1 &
  "$DDP_SOURCE_DIR/scripts/cluster/slurm-up.sh" "$CLUSTER" "${1:-multi}" >/dev/null || fail "slurm-up.sh failed"
  export SLURM_CONF="$CLUSTER/etc/slurm.conf"
}

# wait_job JOBID SECONDS: until the job has left the queue (fails after SECONDS).
wait_job() {
  local jid=$1 limit=$(( $2 * 10 )) i
  for ((i = 0; i < limit; i++)); do
    squeue -h -j "$jid" 2>/dev/null | grep -q . || return 0
    sleep 0.1
  done
  fail "job $jid still in the queue after $2 s"
}

# job_field JOBID FIELD: e.g. job_field 3 ExitCode -> 0:0 (slurmctld keeps finished jobs 300 s).
job_field() { scontrol show job "$1" | grep -oE "(^|[[:space:]])$2=[^[:space:]]+" | head -1 | cut -d= -f2; }

# wait_files PATTERN COUNT SECONDS: until COUNT files match the glob PATTERN.
wait_files() {
  local pattern=$1 count=$2 limit=$(( $3 * 10 )) i n=0
  for ((i = 0; i < limit; i++)); do
    n=$( (compgen -G "$pattern" || true) | wc -l)
    (( n >= count )) && return 0
    sleep 0.1
  done
  fail "only $n of $count files matching $pattern after $3 s"
}

# check_json FILE PYTHON-EXPR...: each expression must be true for `docs` (a list of the JSON
# objects, one per line of FILE, sorted by effective node rank when present).
check_json() {
  local file=$1; shift
  "$PY" - "$file" "$@" <<'PY'
import json, sys
path, exprs = sys.argv[1], sys.argv[2:]
docs = [json.loads(l.split(": ", 1)[1] if l[:1].isdigit() and ": " in l else l)
        for l in open(path) if l.strip()]
def key(d):
    nr = (d.get("effective") or {}).get("node_rank")
    return nr["value"] if nr else 0
docs.sort(key=key)
for e in exprs:
    if not eval(e, {"docs": docs}):
        print("FAIL:", e, "\n", json.dumps(docs, indent=1), file=sys.stderr)
        sys.exit(1)
PY
}
