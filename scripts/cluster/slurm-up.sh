#!/usr/bin/env bash
# Brings up a private Slurm cluster on this machine, all state under DIR, nothing under /etc:
# munged + slurmctld + two slurmd nodes, then waits until both nodes are idle.
#
#   scripts/cluster/slurm-up.sh DIR [multi|netns]
#     multi  (default) nodes n1, n2: two slurmd on 127.0.0.1 (multiple-slurmd), same hostname
#     netns  nodes node1, node2: each slurmd in its own network + UTS namespace (10.77.0.11/.12,
#            hostnames node1/node2) behind a bridge; needs root with CAP_NET_ADMIN/CAP_SYS_ADMIN
#   source DIR/env.sh      # exports SLURM_CONF for srun/sbatch/squeue/scontrol
#   scripts/cluster/slurm-down.sh DIR
#
# Daemons run in the background (setsid) and are stopped by pid (pid files in DIR/run) by
# slurm-down.sh. Ports are picked free at bring-up, so several clusters can run side by side in
# multi mode. Env: SLURMCI_CPUS (CPUs per node, default 4; config_overrides lets it exceed the
# real count), SLURMCI_TIMEOUT (seconds to wait for idle nodes, default 30).
# Recipe and quirks: /work/shared/docs/slurm-mpi.md (summarised in docs/cluster.md).
set -euo pipefail

DIR="${1:?usage: slurm-up.sh DIR [multi|netns]}"
MODE="${2:-multi}"
CPUS="${SLURMCI_CPUS:-4}"
TIMEOUT="${SLURMCI_TIMEOUT:-30}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

for tool in munged mungekey slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null || { echo "slurm-up: $tool not found (apt-get install slurm-wlm munge)" >&2; exit 2; }
done
[[ "$MODE" == multi || "$MODE" == netns ]] || { echo "slurm-up: unknown mode '$MODE'" >&2; exit 2; }

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
chmod 755 "$DIR"   # munged wants o+x on every directory above its socket
H="$(hostname -s)"
if [[ "$MODE" == multi ]]; then NODES=(n1 n2); else NODES=(node1 node2); fi
rm -rf "$DIR/state"
mkdir -p "$DIR"/{etc,state,log,run,munge}
for n in "${NODES[@]}"; do mkdir -p "$DIR/spool/$n" "$DIR/tmpfs/$n"; done
echo "$MODE" >"$DIR/mode"

# Free TCP ports for slurmctld and each slurmd (bind to port 0, then release).
read -r CTLD_PORT N1_PORT N2_PORT < <(/usr/bin/python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)

# The first job id: ddprun derives its default port from the job id (15000 + last 4 digits), so
# clusters brought up side by side (ctest -j) must not all start at job 1, or their jobs would
# meet on one port. Pick an id whose next 10 derived ports are free now.
FIRST_JOB_ID="$(/usr/bin/python3 - <<'PY'
import random, socket
def free(port):
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False
for _ in range(50):
    k = random.randint(1, 9990)
    if all(free(15000 + k + i) for i in range(10)):
        break
print(k)
PY
)"

# On any failure below, stop what was started.
trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "slurm-up: failed (rc=$rc), logs in $DIR/log" >&2; "$HERE/slurm-down.sh" "$DIR" >/dev/null 2>&1 || true; fi' EXIT

# munge: private key and socket; the socket directory must be o+x.
chmod 755 "$DIR/munge"
mungekey -c -f -k "$DIR/munge/munge.key" >/dev/null
munged --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
  --pid-file="$DIR/run/munged.pid" --log-file="$DIR/munge/munged.log" \
  --seed-file="$DIR/munge/munged.seed"

CTLD_ADDR=127.0.0.1
if [[ "$MODE" == netns ]]; then
  "$HERE/netns-up.sh" "$DIR"
  CTLD_ADDR=10.77.0.1
fi

cat >"$DIR/etc/slurm.conf" <<CONF
ClusterName=ddpci
SlurmctldHost=$H($CTLD_ADDR)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$N1_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
TmpFS=$DIR/tmpfs/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SlurmdParameters=config_overrides
MailProg=/bin/true
KillWait=5
FirstJobId=$FIRST_JOB_ID
CONF
if [[ "$MODE" == multi ]]; then
  cat >>"$DIR/etc/slurm.conf" <<CONF
NodeName=n1 NodeHostname=$H NodeAddr=127.0.0.1 Port=$N1_PORT CPUs=$CPUS RealMemory=1000 State=UNKNOWN
NodeName=n2 NodeHostname=$H NodeAddr=127.0.0.1 Port=$N2_PORT CPUs=$CPUS RealMemory=1000 State=UNKNOWN
CONF
else
  cat >>"$DIR/etc/slurm.conf" <<CONF
NodeName=node1 NodeAddr=10.77.0.11 CPUs=$CPUS RealMemory=1000 State=UNKNOWN
NodeName=node2 NodeAddr=10.77.0.12 CPUs=$CPUS RealMemory=1000 State=UNKNOWN
CONF
fi
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$DIR/etc/slurm.conf"

cat >"$DIR/env.sh" <<ENV
export SLURM_CONF=$DIR/etc/slurm.conf
ENV
export SLURM_CONF="$DIR/etc/slurm.conf"

setsid slurmctld -D -c -f "$SLURM_CONF" >"$DIR/log/slurmctld.out" 2>&1 </dev/null &
if [[ "$MODE" == multi ]]; then
  for n in n1 n2; do
    setsid slurmd -D -N "$n" -f "$SLURM_CONF" >"$DIR/log/slurmd-$n.out" 2>&1 </dev/null &
  done
else
  # nsenter --net, not `ip netns exec`: the latter remounts /sys and slurmd finds no cgroup fs.
  for i in 1 2; do
    setsid nsenter --net="/run/netns/ddpci$i" unshare --uts \
      sh -c "hostname node$i && exec slurmd -D -f '$SLURM_CONF'" \
      >"$DIR/log/slurmd-node$i.out" 2>&1 </dev/null &
  done
fi

deadline=$((SECONDS + TIMEOUT))
until [[ "$(sinfo -h -o '%T' 2>/dev/null | sort -u)" == idle ]] && \
      [[ "$(sinfo -h -N -o '%N' 2>/dev/null | sort -u | wc -l)" == 2 ]]; do
  if (( SECONDS >= deadline )); then
    echo "slurm-up: nodes not idle after ${TIMEOUT}s:" >&2; sinfo -N >&2 || true
    exit 1
  fi
  sleep 0.2
done
trap - EXIT
echo "slurm-up: $MODE cluster up in $DIR (SLURM_CONF=$SLURM_CONF)"
