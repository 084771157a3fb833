#!/usr/bin/env bash
# Removes what netns-up.sh DIR created (listed in DIR/netns.created).
set -uo pipefail
DIR="${1:?usage: netns-down.sh DIR}"
created="$DIR/netns.created"
[[ -f "$created" ]] || exit 0
for i in 1 2; do
  grep -qx "ns ddpci$i" "$created" && ip netns del "ddpci$i" 2>/dev/null   # removes eth0 and its veth peer
done
grep -qx bridge "$created" && ip link del ddpcibr0 2>/dev/null
if grep -qx rundir "$created" && [[ -z "$(ls -A /run/netns 2>/dev/null)" ]]; then
  umount /run/netns 2>/dev/null; rmdir /run/netns 2>/dev/null
fi
rm -f "$created"
exit 0
