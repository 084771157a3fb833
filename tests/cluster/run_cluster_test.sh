#!/usr/bin/env bash
# One cluster test per invocation:  run_cluster_test.sh CASE
# Needs DDP_SOURCE_DIR (repository) and DDP_BIN_DIR (<build>/bin, with scheduler_probe and ddprun).
# Exit 0 pass, 1 fail, 77 skip (tool missing, no privileges, or ddprun not built).
#
# probe_* cases run scheduler_probe (ddp_scheduler's detection on its real environment) inside real
# srun / sbatch / mpirun steps. e2e_* cases run ddprun itself and need its multi-node support.
set -euo pipefail
CASE="${1:?usage: run_cluster_test.sh CASE}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/cluster_lib.sh"
PROBE="$DDP_BIN_DIR/scheduler_probe"
DDPRUN="$DDP_BIN_DIR/ddprun"
OUT="$WORK/out"
mkdir -p "$OUT"

# Expressions shared by the Slurm cases (two nodes n1, n2, one probe per node).
SLURM_TWO_NODES=(
  'len(docs) == 2'
  'all(d["scheduler"] == "slurm" and "error" not in d for d in docs)'
  '[d["effective"]["node_rank"]["value"] for d in docs] == [0, 1]'
  'all(d["effective"]["node_rank"]["origin"] == "SLURM_NODEID" for d in docs)'
  'all(d["effective"]["nnodes"]["value"] == 2 for d in docs)'
  'all(d["effective"]["rdzv_id"]["value"] == d["detected"]["job_id"]["value"] for d in docs)'
  'all(d["effective"]["master_port"]["value"] == 15000 + int(d["detected"]["job_id"]["value"]) % 17768 for d in docs)'
)
# n1/n2 are Slurm names only (no DNS): the address must come from Slurm's NodeAddr.
N1_BY_NODEADDR=(
  'all(d["effective"]["master_addr"]["value"] == "n1" for d in docs)'
  'all(d["master_resolution"]["address"] == "127.0.0.1" for d in docs)'
  'all(d["master_resolution"]["how"].startswith("Slurm NodeAddr") for d in docs)'
)

require_ddprun() {
  [[ -x "$DDPRUN" ]] || skip "$DDPRUN is not built"
  # A ddprun built before its scheduler support (no --print-env-detect) cannot run these cases.
  "$DDPRUN" --help 2>&1 | grep -q -- '--print-env-detect' ||
    skip "this ddprun has no scheduler detection (--print-env-detect missing); rebuild it"
}

# The 4 rank files of a 2 nodes x 2 processes gloo job agree.
#   check_gloo_four_ranks [NODE_A NODE_B [MASTER_ADDR]]     (default n1 n2, any single master)
check_gloo_four_ranks() {
  "$PY" - "$OUT" "${1:-n1}" "${2:-n2}" "${3:-}" <<'PY' || fail "the ranks do not agree"
import glob, json, sys
out, a, b, master = sys.argv[1:]
docs = sorted((json.load(open(p)) for p in glob.glob(out + "/rank-*.json")), key=lambda d: d["rank"])
assert [d["rank"] for d in docs] == [0, 1, 2, 3], docs
assert all(d["world_size"] == 4 and d["sum"] == 10 for d in docs), docs
assert all(d["nodes"] == [a, a, b, b] for d in docs), docs
assert [d["node"] for d in docs] == [a, a, b, b], docs
assert [d["local_rank"] for d in docs] == [0, 1, 0, 1], docs
assert len({(d["master_addr"], d["master_port"]) for d in docs}) == 1, docs
assert not master or docs[0]["master_addr"] == master, docs
PY
}

case "$CASE" in
probe_srun)
  cluster_up multi
  timeout 60 srun -N2 --ntasks-per-node=1 -o "$OUT/probe-%t.json" "$PROBE" --resolve || fail "srun rc=$?"
  cat "$OUT"/probe-*.json >"$WORK/all.jsonl"
  check_json "$WORK/all.jsonl" "${SLURM_TWO_NODES[@]}" "${N1_BY_NODEADDR[@]}" \
    'all(d["effective"]["master_addr"]["origin"] == "SLURM_STEP_NODELIST" for d in docs)' \
    'docs[0]["also_present"] == []'
  # A second job on the same nodes gets another port.
  port1="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["effective"]["master_port"]["value"])' "$OUT/probe-0.json")"
  timeout 60 srun -N1 -o "$OUT/second.json" "$PROBE" || fail "second srun failed"
  port2="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["effective"]["master_port"]["value"])' "$OUT/second.json")"
  [[ "$port1" != "$port2" ]] || fail "two jobs got the same port $port1"
  # The --print-env-detect text, from a real step.
  timeout 60 srun -N2 --ntasks-per-node=1 -l "$PROBE" --resolve --report >"$WORK/report.txt"
  grep -q '^1: scheduler: slurm (selected by SLURM_JOB_ID)' "$WORK/report.txt" || fail "report: $(cat "$WORK/report.txt")"
  grep -q '^1:   node_rank    1  *from SLURM_NODEID=1' "$WORK/report.txt" || fail "report: $(cat "$WORK/report.txt")"
  grep -q '127.0.0.1 *n1 resolved by Slurm NodeAddr' "$WORK/report.txt" || fail "report: $(cat "$WORK/report.txt")"
  ;;
probe_sbatch)
  cluster_up multi
  jid="$(sbatch --parsable -N2 --ntasks-per-node=1 -o "$OUT/batch.log" \
         --wrap "srun -o '$OUT/probe-%t.json' '$PROBE' --resolve")"
  wait_job "$jid" 60
  [[ "$(job_field "$jid" ExitCode)" == 0:0 ]] || fail "job $jid: $(job_field "$jid" JobState) $(job_field "$jid" ExitCode): $(cat "$OUT/batch.log")"
  cat "$OUT"/probe-*.json >"$WORK/all.jsonl"
  check_json "$WORK/all.jsonl" "${SLURM_TWO_NODES[@]}" "${N1_BY_NODEADDR[@]}" \
    "all(d['detected']['job_id']['value'] == '$jid' for d in docs)"
  ;;
probe_sbatch_batch_script_refused)
  cluster_up multi
  # ddprun in the batch script of a 2-node job would only run on the first node: refused.
  jid="$(sbatch --parsable -N2 --ntasks-per-node=1 -o "$OUT/probe.json" --wrap "'$PROBE'")"
  wait_job "$jid" 60
  [[ "$(job_field "$jid" ExitCode)" == 2:0 ]] || fail "expected exit 2, got $(job_field "$jid" ExitCode)"
  check_json "$OUT/probe.json" 'len(docs) == 1' '"batch script" in docs[0]["error"]' \
    '"srun --ntasks-per-node=1" in docs[0]["error"]'
  ;;
probe_srun_per_task_refused)
  cluster_up multi
  rc=0
  timeout 60 srun -N2 -n4 -O -o "$OUT/probe-%t.json" "$PROBE" || rc=$?
  [[ $rc -eq 2 ]] || fail "srun -n4 on 2 nodes: expected the probes to exit 2, srun rc=$rc"
  cat "$OUT"/probe-*.json >"$WORK/all.jsonl"
  check_json "$WORK/all.jsonl" 'len(docs) == 4' \
    'all("--ntasks-per-node=1" in d["error"] and "SLURM_STEP_NUM_TASKS=4" in d["error"] for d in docs)'
  ;;
probe_srun_pmix)
  cluster_up multi
  timeout 60 srun --mpi=pmix -N2 --ntasks-per-node=1 -o "$OUT/probe-%t.json" "$PROBE" --resolve || fail "srun --mpi=pmix failed"
  cat "$OUT"/probe-*.json >"$WORK/all.jsonl"
  check_json "$WORK/all.jsonl" "${SLURM_TWO_NODES[@]}" "${N1_BY_NODEADDR[@]}" \
    'all(d["also_present"] == ["pmix"] for d in docs)'
  ;;
probe_mpirun)
  require_tools mpirun
  export OUT
  timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
    sh -c "'$PROBE' --resolve >\"\$OUT/probe-\$OMPI_COMM_WORLD_RANK.json\"" || fail "mpirun failed"
  cat "$OUT"/probe-*.json >"$WORK/all.jsonl"
  check_json "$WORK/all.jsonl" 'len(docs) == 2' \
    'all(d["scheduler"] == "openmpi" for d in docs)' \
    '[d["effective"]["node_rank"]["value"] for d in docs] == [0, 1]' \
    'all(d["effective"]["node_rank"]["origin"] == "OMPI_COMM_WORLD_RANK" for d in docs)' \
    'all(d["effective"]["nnodes"]["value"] == 2 for d in docs)' \
    'all(d["effective"]["master_addr"]["value"] == "127.0.0.1" for d in docs)' \
    'all(d["effective"]["master_addr"]["origin"] == "OMPI_COMM_WORLD_LOCAL_SIZE" for d in docs)' \
    'all(d["master_resolution"]["how"] == "DNS" for d in docs)' \
    'docs[0]["effective"]["master_port"] == docs[1]["effective"]["master_port"]' \
    'docs[0]["effective"]["rdzv_id"]["value"] == docs[1]["effective"]["rdzv_id"]["value"]' \
    'all(any("share this host" in n for n in d["notes"]) for d in docs)'
  ;;
probe_mpirun_in_sbatch)
  require_tools mpirun
  cluster_up multi
  jid="$(sbatch --parsable -N2 --ntasks-per-node=1 -o "$OUT/batch.log" --wrap \
    "mpirun --allow-run-as-root -np 2 --map-by ppr:1:node sh -c \"'$PROBE' --resolve >'$OUT'/probe-\\\$OMPI_COMM_WORLD_RANK.json\"")"
  wait_job "$jid" 60
  [[ "$(job_field "$jid" ExitCode)" == 0:0 ]] || fail "job $jid $(job_field "$jid" ExitCode): $(cat "$OUT/batch.log")"
  cat "$OUT"/probe-*.json >"$WORK/all.jsonl"
  check_json "$WORK/all.jsonl" 'len(docs) == 2' \
    'all(d["scheduler"] == "openmpi" and "slurm" in d["also_present"] for d in docs)' \
    '[d["effective"]["node_rank"]["value"] for d in docs] == [0, 1]' \
    'all(d["effective"]["nnodes"]["value"] == 2 for d in docs)' \
    'all(d["effective"]["master_addr"]["origin"] == "SLURM_JOB_NODELIST" for d in docs)' \
    "${N1_BY_NODEADDR[@]}"
  ;;
probe_netns)
  [[ $EUID -eq 0 ]] || skip "netns mode needs root"
  require_tools ip nsenter unshare
  ip link add ddpciprobe0 type bridge 2>/dev/null && ip link del ddpciprobe0 ||
    skip "no CAP_NET_ADMIN here (e.g. an unprivileged container): namespaces cannot be created"
  cluster_up netns
  [[ "$(timeout 60 srun -N2 --ntasks-per-node=1 hostname | sort | tr '\n' ' ')" == "node1 node2 " ]] ||
    fail "the two nodes do not have their own host names"
  timeout 60 srun -N2 --ntasks-per-node=1 -o "$OUT/probe-%t.json" "$PROBE" --resolve || fail "srun failed"
  cat "$OUT"/probe-*.json >"$WORK/all.jsonl"
  check_json "$WORK/all.jsonl" 'len(docs) == 2' \
    '[d["effective"]["node_rank"]["value"] for d in docs] == [0, 1]' \
    'all(d["effective"]["master_addr"]["value"] == "node1" for d in docs)' \
    'all(d["master_resolution"]["address"] == "10.77.0.11" for d in docs)'
  ;;

# ---- end to end: ddprun under the schedulers, with no node or master flags ----
e2e_srun_gloo)
  require_ddprun
  cluster_up multi
  timeout 120 srun -N2 --ntasks-per-node=1 "$DDPRUN" --nproc_per_node=2 --python "$PY" \
    "$HERE/gloo_agree.py" "$OUT" || fail "srun ddprun rc=$?"
  check_gloo_four_ranks
  ;;
e2e_sbatch_gloo)
  require_ddprun
  cluster_up multi
  jid="$(sbatch --parsable -N2 --ntasks-per-node=1 -o "$OUT/batch.log" \
    --wrap "srun '$DDPRUN' --nproc_per_node=2 --python '$PY' '$HERE/gloo_agree.py' '$OUT'")"
  wait_job "$jid" 120
  [[ "$(job_field "$jid" ExitCode)" == 0:0 ]] || fail "job $jid $(job_field "$jid" ExitCode): $(cat "$OUT/batch.log")"
  check_gloo_four_ranks
  ;;
e2e_failing_rank)
  require_ddprun
  cluster_up multi
  # Rank 3 (on n2) exits 7: both nodes stop, and srun and the batch job report 7.
  rc=0
  timeout 120 srun -N2 --ntasks-per-node=1 "$DDPRUN" --nproc_per_node=2 --python "$PY" \
    "$HERE/gloo_agree.py" "$OUT" --fail-rank 3 --exit-code 7 >"$WORK/srun.log" 2>&1 || rc=$?
  [[ $rc -eq 7 ]] || fail "srun rc=$rc, expected 7: $(tail -20 "$WORK/srun.log")"
  jid="$(sbatch --parsable -N2 --ntasks-per-node=1 -o "$OUT/batch.log" --wrap \
    "srun '$DDPRUN' --nproc_per_node=2 --python '$PY' '$HERE/gloo_agree.py' '$OUT' --fail-rank 3 --exit-code 7")"
  wait_job "$jid" 120
  [[ "$(job_field "$jid" ExitCode)" == 7:0 ]] || fail "job $jid $(job_field "$jid" ExitCode), expected 7:0: $(tail -20 "$OUT/batch.log")"
  ;;
e2e_usr1_forwarded)
  require_ddprun
  cluster_up multi
  # Slurm's pre-timeout warning: USR1 reaches every worker and the job keeps running.
  srun -N2 --ntasks-per-node=1 -J usr1test "$DDPRUN" --nproc_per_node=2 --python "$PY" \
    "$HERE/gloo_agree.py" "$OUT" --wait-stop >"$WORK/srun.log" 2>&1 &
  srun_pid=$!
  wait_files "$OUT/ready-*" 4 90
  jid="$(squeue -h -n usr1test -o %i | head -1)"
  [[ -n "$jid" ]] || fail "no job usr1test in the queue"
  scancel --signal=USR1 "$jid"
  wait_files "$OUT/usr1-*" 4 30
  [[ "$(squeue -h -j "$jid" -o %T)" == RUNNING ]] || fail "job $jid stopped after USR1"
  touch "$OUT/stop"
  rc=0; wait "$srun_pid" || rc=$?
  [[ $rc -eq 0 ]] || fail "srun rc=$rc after stop: $(tail -20 "$WORK/srun.log")"
  ;;
e2e_netns_srun_gloo)
  # Two nodes with their own IPs and host names: ddprun on node2 must reach node1's store at
  # 10.77.0.11 (found through Slurm's NodeAddr), so nothing may bind to 127.0.0.1 only.
  require_ddprun
  [[ $EUID -eq 0 ]] || skip "netns mode needs root"
  ip link add ddpciprobe0 type bridge 2>/dev/null && ip link del ddpciprobe0 ||
    skip "no CAP_NET_ADMIN here: namespaces cannot be created"
  cluster_up netns
  # Gloo picks its interface from the host name, which does not resolve inside the namespaces.
  GLOO_SOCKET_IFNAME=eth0 timeout 120 srun -N2 --ntasks-per-node=1 "$DDPRUN" --nproc_per_node=2 \
    --python "$PY" "$HERE/gloo_agree.py" "$OUT" || fail "srun ddprun rc=$?"
  check_gloo_four_ranks node1 node2 10.77.0.11
  ;;
e2e_mpirun)
  require_ddprun
  require_tools mpirun
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$DDPRUN" --nproc_per_node=1 \
    --python "$PY" "$HERE/gloo_agree.py" "$OUT" || fail "mpirun ddprun failed"
  "$PY" - "$OUT" <<'PY' || fail "the 2 ranks do not agree"
import glob, json, sys
docs = sorted((json.load(open(p)) for p in glob.glob(sys.argv[1] + "/rank-*.json")), key=lambda d: d["rank"])
assert [d["rank"] for d in docs] == [0, 1] and all(d["sum"] == 3 and d["world_size"] == 2 for d in docs), docs
assert [d["group_rank"] for d in docs] == [0, 1], docs
PY
  ;;
example_sbatch_one_node|example_sbatch_two_nodes)
  # examples/slurm/train.sbatch as shipped (the worker, then train_ddp.py), on 1 and 2 nodes.
  [[ -x "$DDP_BIN_DIR/worker" ]] || skip "$DDP_BIN_DIR/worker is not built (LibTorch missing?)"
  [[ -x "$DDPRUN" ]] || skip "$DDPRUN is not built"
  nodes=1
  [[ "$CASE" == example_sbatch_two_nodes ]] && { require_ddprun; nodes=2; }
  cluster_up multi
  cd "$OUT"
  jid="$(REPO="$DDP_SOURCE_DIR" DDPRUN="$DDPRUN" WORKER="$DDP_BIN_DIR/worker" \
         sbatch --parsable -N"$nodes" "$DDP_SOURCE_DIR/examples/slurm/train.sbatch")"
  wait_job "$jid" 240
  log="$OUT/ddprun-train-$jid.out"
  [[ "$(job_field "$jid" ExitCode)" == 0:0 ]] || fail "job $jid $(job_field "$jid" ExitCode): $(tail -20 "$log")"
  grep -q "worker: trained 4096 samples" "$log" || fail "no worker summary: $(tail -20 "$log")"
  grep -q "$((2 * nodes)) ranks, final loss .*, replicas identical: True" "$log" || fail "train_ddp.py: $(tail -20 "$log")"
  ;;
*)
  fail "unknown case $CASE"
  ;;
esac
echo "PASS: $CASE"
