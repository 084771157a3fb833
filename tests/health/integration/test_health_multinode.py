# SPDX-License-Identifier: MIT
"""Two ddprun nodes on 127.0.0.1: the hang verdict is job-wide (docs/health.md, Multi-node).
A node whose ranks are silent is not hung while another node's ranks progress; a real hang (no rank
of the job progresses) ends both with exit 75 and stacks on both. The same two cases on
--rdzv_backend etcd (a real 3-member cluster; skipped without etcd), where each node's progress
travels through etcd instead of the c10d store."""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import main, read_events  # noqa: E402
from test_multinode import FAST, Node, finish, free_port  # noqa: E402
from harness import Skip  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "..", "support"))
from etcd_cluster import ETCD, EtcdCluster  # noqa: E402

# Node 1's ranks stop after their first step; node 0's ranks go on for a few steps and then wait
# for node 1 forever, as a collective would: from then on no rank of the job progresses.
HANG = """import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
path = os.environ['DDPRUN_HEARTBEAT_SOCKET']
def stuck_on_node_1():
    time.sleep(600)
def waiting_for_node_1():
    time.sleep(600)
s.sendto(b'step 1', path)
if os.environ['GROUP_RANK'] == '1':
    stuck_on_node_1()
for step in range(2, 12):
    time.sleep(0.2)
    s.sendto(b'step %d' % step, path)
waiting_for_node_1()
"""

# Only rank 0 (on node 0) logs; every other rank, node 1's included, is silent but alive.
ONLY_RANK_0_LOGS = """import os, sys, time
if os.environ['RANK'] == '0':
    for i in range(45):
        print('step', i, flush=True)
        time.sleep(0.2)
else:
    time.sleep(8)
"""


def two_nodes(tmp, script_text, extra, etcd=None):
    script = os.path.join(tmp, "job.py")
    with open(script, "w") as f:
        f.write(script_text)
    port = free_port()
    nodes = []
    for k in (0, 1):
        if etcd:  # node ranks on arrival; node 0 hosts the attempt's workers' store
            where = ["--rdzv_backend", "etcd", "--rdzv_endpoint", etcd.endpoints, "--rdzv_id", "hang",
                     "--local_addr", "127.0.0.1", "--master_port", 0]
        else:
            where = ["--node_rank", k, "--master_addr", "127.0.0.1", "--master_port", port]
        args = ["--nnodes", 2, *where, "--nproc_per_node", 2, "--rdzv_conf", FAST, *extra,
                "--log-dir", os.path.join(tmp, f"logs{k}"), script]
        nodes.append(Node(tmp, f"node{k}", args))
    return nodes


def etcd_cluster():
    if not os.path.exists(ETCD):
        raise Skip("etcd is not installed (Debian: etcd-server)")
    return EtcdCluster(3)


def test_silent_node_is_not_hung_while_another_node_progresses(tmp, etcd=None):
    # Judged alone, node 1 would be hung 3 s after its start (no progress of any source there).
    nodes = two_nodes(tmp, ONLY_RANK_0_LOGS,
                      ["--hang-timeout", "3", "--hang-startup-timeout", "3"], etcd)
    assert finish(nodes, timeout=90) == [0, 0], nodes
    for k, node in enumerate(nodes):
        ev = read_events(node.events)
        assert not [e for e in ev if e["event"] in ("hang", "stacks_saved")], (k, ev)
        _, err = node.text()
        assert "hung" not in err, (k, node)


def test_job_wide_hang_ends_both_with_75_and_stacks_on_both(tmp, etcd=None):
    nodes = two_nodes(tmp, HANG, ["--hang-timeout", "3"], etcd)
    assert finish(nodes, timeout=90) == [75, 75], nodes
    sources = []
    # On etcd the node ranks follow arrival: name each node by the rank it got.
    group = [next(e["node_rank"] for e in read_events(n.events) if e["event"] == "rendezvous")
             if etcd else k for k, n in enumerate(nodes)]
    for k, node in zip(group, nodes):
        ev = read_events(node.events)
        hang = [e for e in ev if e["event"] == "hang"]
        assert len(hang) == 1, (k, ev)
        sources.append(hang[0]["source"])
        # Its own verdict (the last progress anywhere was too long ago), or the other node's news.
        assert hang[0]["source"] in ("heartbeat", "another node"), hang
        saved = [e for e in ev if e["event"] == "stacks_saved"]
        assert len(saved) == 1 and len(saved[0]["files"]) == 2, (k, saved)
        order = [e["event"] for e in ev]
        assert order.index("stacks_saved") < order.index("worker_exit"), (k, order)
        for f in saved[0]["files"]:
            with open(f["path"]) as fh:
                text = fh.read()
            assert ("stuck_on_node_1" if k == 1 else "waiting_for_node_1") in text, (k, text)
        _, err = node.text()
        assert "hung" in err, (k, node)
    assert "heartbeat" in sources, sources  # at least one node reached the verdict itself


def test_etcd_silent_node_is_not_hung_while_another_node_progresses(tmp):
    with etcd_cluster() as cluster:
        test_silent_node_is_not_hung_while_another_node_progresses(tmp, cluster)


def test_etcd_job_wide_hang_ends_both_with_75_and_stacks_on_both(tmp):
    with etcd_cluster() as cluster:
        test_job_wide_hang_ends_both_with_75_and_stacks_on_both(tmp, cluster)


if __name__ == "__main__":
    # Kept run directories (the stacks of hung jobs) go to a scratch TMPDIR removed at the end.
    with tempfile.TemporaryDirectory(prefix="ddprun_health_") as scratch:
        os.environ["TMPDIR"] = scratch
        main(globals())
