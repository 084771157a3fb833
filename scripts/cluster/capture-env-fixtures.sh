#!/usr/bin/env bash
# Captures real scheduler environments (srun, sbatch, salloc, srun --mpi=pmix, mpirun, mpirun
# inside sbatch) from a local cluster into OUT (default tests/cluster/fixtures), keeping only
# launcher-relevant variables and replacing the cluster's temp dir with /tmp/ddpci.
#   scripts/cluster/capture-env-fixtures.sh [OUT]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$(mkdir -p "${1:-$ROOT/tests/cluster/fixtures}" && cd "${1:-$ROOT/tests/cluster/fixtures}" && pwd)"
CL="$(mktemp -d /tmp/ddpci-capture.XXXXXX)"
RAW="$CL/raw"
trap '"$ROOT/scripts/cluster/slurm-down.sh" "$CL"' EXIT
"$ROOT/scripts/cluster/slurm-up.sh" "$CL" multi >/dev/null
source "$CL/env.sh"
mkdir -p "$RAW"
KEEP='^(SLURM|SLURMD|OMPI|PMIX|PMI|MPI_|OPAL|ORTE|PRTE|HYDRA|JOB_COMPLETION|MASTER_|RANK=|WORLD_SIZE|LOCAL_RANK|PET_|TORCHELASTIC)'
export RAW

srun -N2 --ntasks-per-node=1 sh -c 'env >"$RAW/slurm-srun-N2-task$SLURM_PROCID.env"'
srun -N2 -n4 -O sh -c 'env >"$RAW/slurm-srun-N2-n4-task$SLURM_PROCID.env"'
srun --mpi=pmix -N2 --ntasks-per-node=1 sh -c 'env >"$RAW/slurm-srun-pmix-N2-task$SLURM_PROCID.env"'
salloc -N2 --ntasks-per-node=1 sh -c 'env >"$RAW/slurm-salloc-N2.env"' 2>/dev/null
cat >"$CL/job.sh" <<'JOB'
#!/bin/sh
env >"$RAW/slurm-sbatch-N2-batch.env"
srun sh -c 'env >"$RAW/slurm-sbatch-N2-srun-task$SLURM_PROCID.env"'
mpirun --allow-run-as-root -np 2 --map-by ppr:1:node \
  sh -c 'env >"$RAW/ompi-in-sbatch-N2-rank$OMPI_COMM_WORLD_RANK.env"'
JOB
jid="$(sbatch --parsable -N2 --ntasks-per-node=1 -o "$CL/job-%j.out" "$CL/job.sh")"
for _ in $(seq 300); do squeue -h -j "$jid" 2>/dev/null | grep -q . || break; sleep 0.1; done
cat "$CL/job-$jid.out"
# A step on part of the allocation: SLURM_NODEID and SLURM_NNODES describe the step.
jid="$(sbatch --parsable -N2 --ntasks-per-node=1 -o "$CL/job-%j.out" \
  --wrap 'srun -N1 -n1 -w n2 sh -c "env >\"\$RAW/slurm-sbatch-N2-srun-N1-on-n2.env\""')"
for _ in $(seq 300); do squeue -h -j "$jid" 2>/dev/null | grep -q . || break; sleep 0.1; done
(unset SLURM_CONF; mpirun --allow-run-as-root --oversubscribe -np 2 \
  sh -c 'env >"$RAW/ompi-np2-rank$OMPI_COMM_WORLD_RANK.env"')

for f in "$RAW"/*.env; do
  { echo "# captured by scripts/cluster/capture-env-fixtures.sh ($(date -u +%F), slurm $(srun --version | cut -d' ' -f2), $(mpirun --version | head -1))"
    grep -E "$KEEP" "$f" | grep -v OMPI_MCA_orte_precondition_transports | sed "s|$CL|/tmp/ddpci|g" | sort
  } >"$OUT/$(basename "$f")"
done
ls "$OUT"
