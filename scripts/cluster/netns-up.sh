#!/usr/bin/env bash
# Network plumbing for slurm-up.sh's netns mode: bridge ddpcibr0 (10.77.0.1/24) and namespaces
# ddpci1/ddpci2 whose eth0 is 10.77.0.11/12. Records what it created in DIR/netns.created so that
# netns-down.sh removes exactly that. Only one netns cluster can exist at a time (fixed names).
set -euo pipefail
DIR="${1:?usage: netns-up.sh DIR}"
NET=10.77.0
created="$DIR/netns.created"
: >"$created"
if [[ ! -d /run/netns ]]; then echo "rundir" >>"$created"; fi
if ip link show ddpcibr0 >/dev/null 2>&1; then
  echo "netns-up: ddpcibr0 exists already (another netns cluster?)" >&2; exit 1
fi
ip link add ddpcibr0 type bridge && echo "bridge" >>"$created"
ip addr add "$NET.1/24" dev ddpcibr0
ip link set ddpcibr0 up
for i in 1 2; do
  ip netns add "ddpci$i" && echo "ns ddpci$i" >>"$created"
  ip link add "ddpciv$i" type veth peer name eth0 netns "ddpci$i"
  ip link set "ddpciv$i" master ddpcibr0 up
  ip -n "ddpci$i" addr add "$NET.1$i/24" dev eth0
  ip -n "ddpci$i" link set eth0 up
  ip -n "ddpci$i" link set lo up
done
