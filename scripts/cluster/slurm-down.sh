#!/usr/bin/env bash
# Stops a cluster started by slurm-up.sh DIR: cancels its jobs, stops slurmd/slurmctld/munged by
# the pids in DIR/run (TERM, then KILL after a grace period), removes the netns plumbing.
#   scripts/cluster/slurm-down.sh DIR [--keep]     (--keep leaves DIR; logs stay there)
set -uo pipefail
DIR="${1:?usage: slurm-down.sh DIR [--keep]}"
KEEP="${2:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[[ -d "$DIR" ]] || exit 0
DIR="$(cd "$DIR" && pwd)"
export SLURM_CONF="$DIR/etc/slurm.conf"

# alive PID: running and not a zombie (pid 1 here reaps orphans late; kill -0 succeeds on zombies).
alive() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$state" && "$state" != Z ]]
}

# Cancel jobs first so slurmstepd ends the steps' processes while slurmd is still there.
if [[ -f "$DIR/run/slurmctld.pid" ]] && alive "$(cat "$DIR/run/slurmctld.pid")"; then
  timeout 5 scancel --quiet --user="$(id -un)" >/dev/null 2>&1 || true
  for _ in $(seq 50); do
    [[ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]] && break
    sleep 0.1
  done
fi

pids=()
for f in "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid" "$DIR/run/munged.pid"; do
  [[ -f "$f" ]] || continue
  pid="$(cat "$f")"
  [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" && kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
done
for _ in $(seq 50); do
  left=()
  for pid in "${pids[@]}"; do alive "$pid" && left+=("$pid"); done
  ((${#left[@]} == 0)) && break
  sleep 0.1
done
for pid in "${pids[@]}"; do alive "$pid" && kill -KILL "$pid" 2>/dev/null; done
rm -f "$DIR"/run/*.pid

if [[ "$(cat "$DIR/mode" 2>/dev/null)" == netns ]]; then "$HERE/netns-down.sh" "$DIR"; fi
[[ "$KEEP" == --keep ]] || rm -rf "$DIR"
exit 0
