# SPDX-License-Identifier: MIT
"""An elastic c10d job (`--nnodes 2:3`) across three network namespaces on one bridge: node
namespaces at 10.79.N.1-3, each joined by a veth pair to a bridge in a fourth namespace (nothing
is added to the host's own network). The agent at .1 hosts the store. Once all three run their
workers the link of the highest-ranked other node ("node 2") is cut (`ip link set ... down` on its
veth): the two survivors must re-form at world size 2 and exit 0, the cut node must exit 74 (it
lost the store) within a bound. Prints cut -> survivors' workers running and cut -> cut node's end.
Needs root, iproute2 and bridge support; exits 77 (skipped), saying why, when they are missing."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
import test_elastic as el  # noqa: E402
from test_multinode import WORKER, Node, finish  # noqa: E402

TAG = f"{os.getpid() % 100000}"
NS = [f"ddpel{TAG}n{k}" for k in range(3)]
BRIDGE_NS = f"ddpel{TAG}br"
VETH = [f"el{TAG}n{k}" for k in range(3)]  # in the node's namespace
PORT = [f"el{TAG}p{k}" for k in range(3)]  # its peer, on the bridge
NET = f"10.79.{os.getpid() % 250 + 1}"
CUT_BOUND = 15  # s: the cut node must be gone by then (heartbeat_timeout 2 s; its store calls time out)


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def up():
    ip("netns", "add", BRIDGE_NS)
    ip("-n", BRIDGE_NS, "link", "add", "br0", "type", "bridge")
    ip("-n", BRIDGE_NS, "link", "set", "br0", "up")
    for k, ns in enumerate(NS):
        ip("netns", "add", ns)
        ip("link", "add", VETH[k], "netns", ns, "type", "veth", "peer", "name", PORT[k], "netns", BRIDGE_NS)
        ip("-n", BRIDGE_NS, "link", "set", PORT[k], "master", "br0")
        ip("-n", BRIDGE_NS, "link", "set", PORT[k], "up")
        ip("-n", ns, "addr", "add", f"{NET}.{k + 1}/24", "dev", VETH[k])
        ip("-n", ns, "link", "set", VETH[k], "up")
        ip("-n", ns, "link", "set", "lo", "up")


def down():
    for ns in NS + [BRIDGE_NS]:
        ip("netns", "del", ns, check=False)  # takes its veth ends (and the bridge) with it


def main():
    if os.geteuid() != 0:
        print("SKIP: needs root for ip netns")
        sys.exit(77)
    try:
        up()
    except (OSError, subprocess.CalledProcessError) as e:
        down()
        print(f"SKIP: cannot create the namespaces and bridge: {' '.join(getattr(e, 'cmd', []) or [])}: "
              f"{(getattr(e, 'stderr', None) or e)}".strip())
        sys.exit(77)
    try:
        with tempfile.TemporaryDirectory(prefix="ddprun_elnetns_") as tmp:
            try:
                run(tmp)
            except Exception:  # reported here: the nodes' logs are gone once tmp is
                import traceback
                traceback.print_exc()
                sys.exit(1)
    finally:
        down()
    print("PASS elastic 2:3 across namespaces: link cut, survivors re-formed at 2")


def agent(tmp, k):
    ddprun = os.environ["DDPRUN"]
    args = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"{NET}.1:29400", "--rdzv_id", "elns",
            "--nnodes", "2:3", "--nproc_per_node", 1, "--local_addr", f"{NET}.{k + 1}",
            "--rdzv_conf", el.FAST, WORKER, "sleep_once"]
    # `ip netns exec` execs ddprun in the namespace (same pid), so Node's helpers still apply.
    harness.DDPRUN = "ip"
    try:
        return Node(tmp, f"ns{k}", args, prefix=["netns", "exec", NS[k], ddprun])
    finally:
        harness.DDPRUN = ddprun


def run(tmp):
    nodes = []
    try:
        # The store's host first, then the others once it is up (any join order would do).
        nodes.append(agent(tmp, 0))
        wait_until(lambda: el.events(nodes[0], "store"), 30, "the store on the first agent")
        assert el.events(nodes[0], "store")[0]["role"] == "host", nodes[0]
        nodes += [agent(tmp, 1), agent(tmp, 2)]
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 60, "workers on all 3 agents")
        others = nodes[1:]
        victim = max(others, key=lambda n: el.group_rank(n, 0))
        k = nodes.index(victim)
        survivors = [n for n in nodes if n is not victim]
        ip("-n", NS[k], "link", "set", VETH[k], "down")
        cut_at = time.monotonic()
        seen = {}

        def progress():
            now = time.monotonic()
            if "gone" not in seen and victim.proc.poll() is not None:
                seen["gone"] = now
            if "back" not in seen and all(n.started_workers() == 2 for n in survivors):
                seen["back"] = now
            return len(seen) == 2
        try:
            wait_until(progress, 30, "the survivors' re-formed workers and the cut node's end")
        except AssertionError as e:
            raise AssertionError(f"{e}: {seen}\n{victim}")
        assert seen["gone"] - cut_at <= CUT_BOUND, (seen["gone"] - cut_at, victim)
        victim_code = victim.wait(1)
        assert finish(survivors) == [0, 0], survivors
    finally:
        finish(nodes)
    assert victim_code == 74, victim
    err = victim.text()[1]
    why = next((w for w in ("lost the store", "this node was dropped from the job") if w in err), None)
    assert why, victim
    lost = el.group_rank(victim, 0)
    for new_rank, node in enumerate(sorted(survivors, key=lambda n: el.group_rank(n, 0))):
        assert el.group_rank(node, 1) == new_rank, node
        last = el.worker_fields(node, 1)
        assert len(last) == 1 and last[0]["world"] == "2" and last[0]["group"] == f"{new_rank}/2", node
        rescale = el.one_rescale(node)
        assert rescale["old_world_size"] == 3 and rescale["new_world_size"] == 2, node
        assert f"lost node {lost}" in node.text()[1], node
    print(f"  cut node {lost} ({NS[k]}): cut -> survivors' workers running {seen['back'] - cut_at:.2f} s "
          f"(re-formed in {max(e['seconds'] for n in survivors for e in el.events(n, 'rescale')):.2f} s); "
          f"cut -> cut node ended (74, '{why}') "
          f"{seen['gone'] - cut_at:.2f} s (heartbeat_timeout 2 s)")


if __name__ == "__main__":
    main()
