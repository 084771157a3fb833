# SPDX-License-Identifier: MIT
"""Two ddprun nodes in two network namespaces joined by a veth pair (node 0 at 10.78.N.1 hosts
the store, node 1 at 10.78.N.2). Once both run their workers the link is cut (`ip link set ...
down`): node 0 must name the lost node 1, node 1 the lost store, both exit 74, nothing left.
Needs root and iproute2; exits 77 (skipped) when namespaces cannot be made."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import wait_until  # noqa: E402
from test_multinode import FAST, WORKER, Node, finish  # noqa: E402

TAG = f"{os.getpid() % 100000}"
NS = [f"ddpmn{TAG}a", f"ddpmn{TAG}b"]
VETH = [f"mn{TAG}a", f"mn{TAG}b"]
NET = f"10.78.{os.getpid() % 250 + 1}"


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def up():
    for ns in NS:
        ip("netns", "add", ns)
    ip("link", "add", VETH[0], "netns", NS[0], "type", "veth", "peer", "name", VETH[1], "netns", NS[1])
    for k, ns in enumerate(NS):
        ip("-n", ns, "addr", "add", f"{NET}.{k + 1}/24", "dev", VETH[k])
        ip("-n", ns, "link", "set", VETH[k], "up")
        ip("-n", ns, "link", "set", "lo", "up")


def down():
    for ns in NS:
        ip("netns", "del", ns, check=False)  # removes the veth pair with it


def main():
    if os.geteuid() != 0:
        print("SKIP: needs root for ip netns")
        sys.exit(77)
    try:
        up()
    except (OSError, subprocess.CalledProcessError) as e:
        down()
        print(f"SKIP: cannot create network namespaces: {getattr(e, 'stderr', e)}")
        sys.exit(77)
    import tempfile
    try:
        with tempfile.TemporaryDirectory(prefix="ddprun_netns_") as tmp:
            run(tmp)
    finally:
        down()
    print("PASS netns link cut")


def run(tmp):
    ddprun = os.environ["DDPRUN"]
    nodes = []
    for k, ns in enumerate(NS):
        args = ["--nnodes", 2, "--node_rank", k, "--master_addr", f"{NET}.1", "--master_port", 29500,
                "--rdzv_conf", FAST, WORKER, "sleep"]
        # `ip netns exec` execs ddprun in the namespace (same pid), so Node's helpers still apply.
        harness.DDPRUN = "ip"
        try:
            nodes.append(Node(tmp, f"node{k}", args, prefix=["netns", "exec", ns, ddprun]))
        finally:
            harness.DDPRUN = ddprun
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 60, "workers on both nodes")
        ip("-n", NS[1], "link", "set", VETH[1], "down")
        t0 = time.monotonic()
        try:
            codes = [n.wait(30) for n in nodes]
        except Exception:
            finish(nodes)
            raise AssertionError(f"a node did not end after the cut: {nodes}")
        print(f"  both nodes ended {time.monotonic() - t0:.2f} s after the cut (heartbeat_timeout=2)")
    finally:
        finish(nodes)
    assert codes == [74, 74], nodes
    assert "lost node 1" in nodes[0].text()[1], nodes[0]
    assert "lost the store" in nodes[1].text()[1], nodes[1]


if __name__ == "__main__":
    main()
