# SPDX-License-Identifier: MIT
"""Two ddprun nodes on 127.0.0.1: a hang on node 1 ends both with exit 75 and stacks on both.
(The verdict itself is per node; see docs/health.md, Multi-node.)"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import main, read_events  # noqa: E402
from test_multinode import FAST, Node, finish, free_port  # noqa: E402

SCRIPT = """import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
path = os.environ['DDPRUN_HEARTBEAT_SOCKET']
def stuck_on_node_1():
    time.sleep(600)
s.sendto(b'step 1', path)
if os.environ['GROUP_RANK'] == '1':
    stuck_on_node_1()
for step in range(2, 3000):
    time.sleep(0.2)
    s.sendto(b'step %d' % step, path)
"""


def test_hang_on_node_1_ends_both_with_75_and_stacks_on_both(tmp):
    script = os.path.join(tmp, "job.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    port = free_port()
    nodes = []
    for k in (0, 1):
        args = ["--nnodes", 2, "--node_rank", k, "--nproc_per_node", 2, "--master_addr", "127.0.0.1",
                "--master_port", port, "--rdzv_conf", FAST, "--hang-timeout", "3",
                "--log-dir", os.path.join(tmp, f"logs{k}"), script]
        nodes.append(Node(tmp, f"node{k}", args))
    assert finish(nodes, timeout=90) == [75, 75], nodes
    for k, node in enumerate(nodes):
        ev = read_events(node.events)
        hang = [e for e in ev if e["event"] == "hang"]
        assert len(hang) == 1, (k, ev)
        if k == 1:
            assert hang[0]["source"] == "heartbeat", hang
        else:
            assert hang[0]["source"] == "another node" and "node 1" in hang[0]["reason"], hang
        saved = [e for e in ev if e["event"] == "stacks_saved"]
        assert len(saved) == 1 and len(saved[0]["files"]) == 2, (k, saved)
        order = [e["event"] for e in ev]
        assert order.index("stacks_saved") < order.index("worker_exit"), (k, order)
        for f in saved[0]["files"]:
            with open(f["path"]) as fh:
                text = fh.read()
            assert ("stuck_on_node_1" if k == 1 else "job.py") in text, (k, text)
        _, err = node.text()
        assert "hung" in err, (k, node)


if __name__ == "__main__":
    # Kept run directories (the stacks of hung jobs) go to a scratch TMPDIR removed at the end.
    with tempfile.TemporaryDirectory(prefix="ddprun_health_") as scratch:
        os.environ["TMPDIR"] = scratch
        main(globals())
