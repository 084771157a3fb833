# SPDX-License-Identifier: MIT
"""--rdzv_backend etcd against the faults a production etcd has every day (issue 34), with a real
3-member etcd 3.4 cluster on loopback (tests/support/etcd_cluster.py) and real agents:
a first member that accepts TCP and never answers (a tiny listener), or is SIGSTOPped (a hung VM),
while a node is SIGKILLed: the survivor notices within a bound; `compact` of the history mid-job
with the first member killed after it: the job goes on; the watched member killed with a dead
address listed after it, after a quiet stretch longer than heartbeat_timeout: the job goes on;
etcd granting a longer TTL than asked: said at start, and used; a stranger's huge values under
the job's keys: read in pages, the job ends 0;
the leader SIGKILLed at heartbeat_timeout=2 with gloo workers: the job goes on (DDP_ETCD_REPEAT
runs, default 1). Exits 77 when etcd (or torch, for the gloo case) is missing."""
import os
import signal
import socket
import sys
import threading
import time

from harness import clean_env, main, wait_until
import test_multinode as mn
from test_elastic import events, group_rank, kill_agent
from test_etcd import FAST, TOKEN, gloo_world, keys_under, require

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "support"))
from etcd_cluster import EtcdCluster, free_ports, post  # noqa: E402


class BlackHole:
    """A listener that accepts every connection, reads, and never answers (a hung member)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)  # never read back, never answered, never closed

    def close(self):
        self.stopped = True
        self.sock.close()
        for c in self.held:
            c.close()


def nodes_on(tmp, endpoints, nnodes, mode, job):
    """Two agents with one mn_worker each on the etcd members `endpoints` (as written)."""
    return [mn.Node(tmp, f"agent{k}", [
        "--rdzv_backend", "etcd", "--rdzv_endpoint", endpoints, "--rdzv_id", job,
        "--nnodes", nnodes, "--nproc_per_node", 1, "--local_addr", "127.0.0.1",
        "--master_port", 0, "--rdzv_conf", FAST, mn.WORKER, mode],
        env=clean_env(DDPRUN_RDZV_TOKEN=TOKEN)) for k in range(2)]


def survivor_notices_the_loss(tmp, endpoints, bound):
    """A 2:3 job on `endpoints`; node 1 SIGKILLed: node 0 must end 74 naming it within `bound`."""
    nodes = nodes_on(tmp, endpoints, "2:3", "sleep", "sick")
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 60, "workers on both")
        victim = next(n for n in nodes if group_rank(n, 0) == 1)
        survivor = next(n for n in nodes if n is not victim)
        killed_at = kill_agent(victim)
        code = survivor.wait(bound + 10)
        took = time.monotonic() - killed_at
    finally:
        mn.finish(nodes)
    assert code == 74, survivor
    assert "lost node 1" in survivor.text()[1], survivor
    assert took < bound, (took, survivor)
    return took


def test_black_holed_first_member_hides_no_loss(tmp):
    require(torch=False)
    hole = BlackHole()
    try:
        with EtcdCluster(3) as cluster:
            took = survivor_notices_the_loss(
                tmp, f"127.0.0.1:{hole.port},{cluster.endpoints}", bound=12)
    finally:
        hole.close()
    print(f"  black-holed first member, node SIGKILLed -> survivor ended 74 after {took:.2f} s")


def test_stopped_first_member_hides_no_loss(tmp):
    require(torch=False)
    with EtcdCluster(3) as cluster:
        # The job starts on a healthy cluster (the watch on member 0, the first listed), then
        # member 0 hangs like a frozen VM, then a node is lost.
        nodes = nodes_on(tmp, cluster.endpoints, "2:3", "sleep", "stopped")
        try:
            wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 60, "workers")
            cluster.procs[0].send_signal(signal.SIGSTOP)
            time.sleep(1)
            victim = next(n for n in nodes if group_rank(n, 0) == 1)
            survivor = next(n for n in nodes if n is not victim)
            killed_at = kill_agent(victim)
            code = survivor.wait(30)
            took = time.monotonic() - killed_at
        finally:
            cluster.procs[0].send_signal(signal.SIGCONT)
            mn.finish(nodes)
    assert code == 74 and "lost node 1" in survivor.text()[1], survivor
    assert took < 12, (took, survivor)
    print(f"  SIGSTOPped first member, node SIGKILLed -> survivor ended 74 after {took:.2f} s")


def test_compaction_mid_job_is_no_loss(tmp):
    require(torch=False)
    with EtcdCluster(3) as cluster:
        done = os.path.join(tmp, "done")
        nodes = nodes_on(tmp, cluster.endpoints, "2", f"until:{done}", "compacted")
        try:
            wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 60, "workers")
            for i in range(5):  # history after the round's record, then all of it compacted
                post(cluster.endpoint(1), "/v3/kv/put", {"key": "eA==", "value": "eQ=="})
            rev = int(post(cluster.endpoint(1), "/v3/kv/range", {"key": "eA=="})["header"]["revision"])
            post(cluster.endpoint(1), "/v3/kv/compaction", {"revision": str(rev), "physical": True})
            cluster.kill(0)  # the watches on it resume elsewhere, from a compacted revision
            time.sleep(4)  # longer than heartbeat_timeout
            open(done, "w").close()
            codes = mn.finish(nodes)
        finally:
            mn.finish(nodes)
    assert codes == [0, 0], nodes
    for node in nodes:
        assert "lost etcd" not in node.text()[1], node


def test_watched_member_killed_with_a_dead_address_after_it(tmp):
    require(torch=False)
    dead = free_ports(1)[0]  # nothing listens there
    with EtcdCluster(3) as cluster:
        a, b, c = cluster.endpoints.split(",")
        done = os.path.join(tmp, "done")
        nodes = nodes_on(tmp, f"{a},127.0.0.1:{dead},{b},{c}", "2", f"until:{done}", "dead")
        try:
            wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 60, "workers")
            time.sleep(3)  # a quiet stretch longer than heartbeat_timeout (2 s)
            cluster.kill(0)
            time.sleep(4)
            open(done, "w").close()
            codes = mn.finish(nodes)
        finally:
            mn.finish(nodes)
    assert codes == [0, 0], nodes


def test_a_strangers_huge_values_under_the_job_do_not_end_it(tmp):
    """7 x 1.4 MB values of a stranger under the job's round and pending keys (more than one
    reply of 8 MB, Beast's default bound that ended the job 69/74 before): read in pages, the job
    ends 0."""
    require(torch=False)
    import base64
    huge = base64.b64encode(b"x" * 1_400_000).decode()
    with EtcdCluster(3) as cluster:
        for i in range(7):
            where = "r0/stranger" if i < 4 else "pending/stranger"
            key = base64.b64encode(f"/ddprun/big/{where}{i}".encode()).decode()
            post(cluster.endpoint(0), "/v3/kv/put", {"key": key, "value": huge}, timeout=10)
        nodes = nodes_on(tmp, cluster.endpoints, "2", "ok", "big")
        codes = mn.finish(nodes)
    assert codes == [0, 0], nodes


def test_a_longer_granted_ttl_is_used_and_said(tmp):
    """etcd with a 5 s election timeout grants 8 s leases for heartbeat_timeout=2: the agents say
    so at start (a loss takes the 8 s, not the 2 s asked)."""
    require(torch=False)
    slow = ["--election-timeout", "5000", "--heartbeat-interval", "500"]
    with EtcdCluster(1, extra_args=slow) as cluster:
        nodes = nodes_on(tmp, cluster.endpoints, "2:3", "sleep", "ttl")
        try:
            wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 60, "workers")
            victim = next(n for n in nodes if group_rank(n, 0) == 1)
            survivor = next(n for n in nodes if n is not victim)
            killed_at = kill_agent(victim)
            code = survivor.wait(40)
            took = time.monotonic() - killed_at
        finally:
            mn.finish(nodes)
    err = survivor.text()[1]
    assert code == 74, survivor
    assert "etcd granted this node's lease a TTL of 8 s, not the 2 s asked" in err, survivor
    assert 6 < took < 20, (took, survivor)
    print(f"  granted TTL 8 s for 2 s asked: said at start; the loss seen after {took:.2f} s")


def test_leader_killed_at_heartbeat_timeout_2_with_gloo_workers(tmp):
    require()
    runs = int(os.environ.get("DDP_ETCD_REPEAT", "1"))
    for run in range(runs):
        here = os.path.join(tmp, str(run))
        os.makedirs(here)
        with EtcdCluster(3) as cluster:
            nodes = gloo_world(here, cluster, "2", "steps:40")
            try:
                leader = cluster.leader()
                assert leader is not None
                cluster.kill(leader)
                codes = mn.finish(nodes)
            finally:
                mn.finish(nodes)
        assert codes == [0, 0], (run, nodes)
        for node in nodes:
            assert not events(node, "rescale") and not events(node, "restart"), node
        print(f"  run {run + 1}/{runs}: leader killed at heartbeat_timeout=2, exit 0 on both")



def agent_on(tmp, endpoints, nnodes, mode, job, name):
    return mn.Node(tmp, name, [
        "--rdzv_backend", "etcd", "--rdzv_endpoint", endpoints, "--rdzv_id", job,
        "--nnodes", nnodes, "--nproc_per_node", 1, "--local_addr", "127.0.0.1",
        "--master_port", 0, "--rdzv_conf", FAST, mn.WORKER, mode],
        env=clean_env(DDPRUN_RDZV_TOKEN=TOKEN))


def test_leader_killed_while_the_agents_join(tmp):
    """Breaker F5: the etcd leader SIGKILLed while the agents join (one waits for the other, the
    other starts right after the kill), heartbeat_timeout=2. The members answer "no leader" (or
    hang) until the election ends; an election timeout of 3 s makes that longer than the join's
    calls' deadline (2 s), which ended the join 69 before. The join waits it out and says so once;
    the job runs."""
    require(torch=False)
    slow = ["--election-timeout", "3000", "--heartbeat-interval", "300"]
    with EtcdCluster(3, extra_args=slow) as cluster:
        first = agent_on(tmp, cluster.endpoints, "2", "ok", "election", "first")
        nodes = [first]
        try:
            wait_until(lambda: keys_under(cluster, "/ddprun/election/r0/alive/"), 30,
                       "the first agent waiting in round 0")
            leader = cluster.leader()
            assert leader is not None
            cluster.kill(leader)
            nodes.append(agent_on(tmp, cluster.endpoints, "2", "ok", "election", "second"))
            codes = mn.finish(nodes, timeout=60)
        finally:
            mn.finish(nodes)
    assert codes == [0, 0], nodes
    said = sum("an election?" in n.text()[1] for n in nodes)
    assert said >= 1, nodes  # the join met the election (else this test proved nothing)
    print(f"  leader killed while joining: exit 0 on both; {said} agent(s) waited out the election")


def test_black_holes_listed_before_the_members_cost_one_deadline(tmp):
    """Breakers F1/F2: four listeners that accept and never answer, listed before the 3 real
    members: each added 0.5 s to the first join's cluster check and the calls after it ran out
    their deadline in them (69, though healthy members followed). Now the check asks every member
    at once within one deadline and the calls start on the member that answered: exit 0."""
    require(torch=False)
    holes = [BlackHole() for _ in range(4)]
    try:
        with EtcdCluster(3) as cluster:
            listed = ",".join(f"127.0.0.1:{h.port}" for h in holes) + "," + cluster.endpoints
            started = time.monotonic()
            nodes = nodes_on(tmp, listed, "2", "ok", "holes")
            codes = mn.finish(nodes, timeout=60)
            took = time.monotonic() - started
    finally:
        for h in holes:
            h.close()
    assert codes == [0, 0], nodes
    print(f"  4 black holes listed first: exit 0 on both after {took:.2f} s")


if __name__ == "__main__":
    main(globals())
