# SPDX-License-Identifier: MIT
"""Elastic c10d jobs (--nnodes=MIN:MAX): real ddprun agents on 127.0.0.1 around a `ddprun
--store-only` store. A SIGKILLed agent is a scale-down: the survivors re-form at once with
contiguous ranks in their old order and a new WORLD_SIZE; below MIN, or past max_rescales, the
job ends with exit 74 naming the lost node."""
import os
import signal
import subprocess
import time

from harness import main, read_events, stop, wait_until
import test_multinode as mn  # a module, not its names: main() runs every test_* name here

FAST = "heartbeat_interval=0.3,heartbeat_timeout=2,join_timeout=30,last_call_timeout=1"


class Store:
    def __init__(self):
        self.proc = subprocess.Popen([os.environ["DDPRUN"], "--store-only", "--master_port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.port = int(self.proc.stdout.readline())

    def close(self):
        stop(self.proc)


def agents(tmp, port, count, nnodes, conf=FAST, mode="sleep_once", first=0, extra=()):
    nodes = []
    for k in range(first, first + count):
        args = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "el",
                "--nnodes", nnodes, "--nproc_per_node", 1, "--rdzv_conf", conf, *extra, mn.WORKER, mode]
        nodes.append(mn.Node(tmp, f"agent{k}", args))
    return nodes


def events(node, kind):
    try:
        return [e for e in read_events(node.events) if e.get("event") == kind]
    except (OSError, ValueError):
        return []


def group_rank(node, attempt):
    """This agent's node rank in round `attempt`, from its rendezvous event."""
    return next(e["node_rank"] for e in events(node, "rendezvous") if e["attempt"] == attempt)


RESCALE_FIELDS = {"event", "time", "attempt", "reason", "change", "old_nodes", "new_nodes",
                  "old_num_nodes", "new_num_nodes", "old_world_size", "new_world_size", "seconds"}


def one_rescale(node):
    """The agent's one `rescale` event, checked against its `rendezvous` events: every field, the
    same on both re-form paths (a lost heartbeat, a restart that formed without a node)."""
    rescale = events(node, "rescale")
    assert len(rescale) == 1, node
    e = rescale[0]
    assert set(e) == RESCALE_FIELDS, (sorted(e), node)
    rounds = events(node, "rendezvous")
    new = next(k for k, r in enumerate(rounds) if r["attempt"] == e["attempt"])
    assert new > 0, (e, node)
    before, after = rounds[new - 1], rounds[new]
    assert e["old_nodes"] == [n["name"] for n in before["nodes"]], (e, before, node)
    assert e["new_nodes"] == [n["name"] for n in after["nodes"]], (e, after, node)
    assert e["old_num_nodes"] == before["num_nodes"] and e["new_num_nodes"] == after["num_nodes"], (e, node)
    assert e["old_world_size"] == before["world_size"] and e["new_world_size"] == after["world_size"], (e, node)
    assert e["seconds"] >= 0, (e, node)
    return e


def kill_agent(node):
    os.kill(node.proc.pid, signal.SIGKILL)  # the agent only: as if its machine vanished
    return time.monotonic()


def test_three_at_2_3_lose_one_and_finish_at_2(tmp):
    store = Store()
    nodes = agents(tmp, store.port, 3, "2:3")
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on all 3 agents")
        order = sorted(nodes, key=lambda n: group_rank(n, 0))
        victim = order[1]  # the middle one: the survivors' order must hold across the gap
        killed_at = kill_agent(victim)
        survivors = [order[0], order[2]]
        wait_until(lambda: all(n.started_workers() == 2 for n in survivors), 30, "re-formed workers")
        back_at = time.monotonic()
        assert mn.finish(survivors) == [0, 0], survivors
    finally:
        mn.finish(nodes)
        store.close()
    for new_rank, node in enumerate(survivors):
        assert group_rank(node, 1) == new_rank, node  # old relative order, contiguous
        second = [mn.fields(l) for l in mn.worker_lines(node) if mn.fields(l)["restart"] == "1"]
        assert len(second) == 1, node
        assert second[0]["world"] == "2" and second[0]["rank"] == str(new_rank), node
        assert second[0]["group"] == f"{new_rank}/2", node
        rescale = one_rescale(node)
        assert rescale["old_world_size"] == 3 and rescale["new_world_size"] == 2, node
        assert rescale["old_num_nodes"] == 3 and rescale["new_num_nodes"] == 2, node
        assert rescale["reason"].startswith("lost node 1") and rescale["change"] == "loss", node
        assert rescale["seconds"] < 5, node  # the survivors' wait for each other, not the detection
        summary = events(node, "summary")[-1]
        assert summary["exit_code"] == 0 and len(summary["membership_changes"]) == 1, node
        assert "lost node 1" in node.text()[1], node
    took = max(e["seconds"] for n in survivors for e in events(n, "rescale"))
    print(f"  kill -> survivors' workers running: {back_at - killed_at:.2f} s "
          f"(heartbeat_timeout 2 s; re-form round, workers stopped -> formed: {took:.2f} s)")


def test_below_min_ends_with_74_naming_the_lost_node(tmp):
    store = Store()
    nodes = agents(tmp, store.port, 2, "2:3")
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both agents")
        victim = min(nodes, key=lambda n: -group_rank(n, 0))
        survivor = next(n for n in nodes if n is not victim)
        kill_agent(victim)
        assert survivor.wait(30) == 74, survivor
    finally:
        mn.finish(nodes)
        store.close()
    assert "fewer than the minimum of 2" in survivor.text()[1], survivor
    assert f"lost node {group_rank(victim, 0)}" in survivor.text()[1], survivor


def test_max_rescales_1_ends_the_job_at_the_second_change(tmp):
    store = Store()
    nodes = agents(tmp, store.port, 3, "1:3", conf=FAST + ",max_rescales=1", mode="sleep")
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on all 3 agents")
        order = sorted(nodes, key=lambda n: group_rank(n, 0))
        kill_agent(order[2])
        wait_until(lambda: all(n.started_workers() == 2 for n in order[:2]), 30, "re-formed workers")
        kill_agent(order[1])
        assert order[0].wait(30) == 74, order[0]
    finally:
        mn.finish(nodes)
        store.close()
    err = order[0].text()[1]
    assert "max_rescales 1" in err, order[0]
    assert len(events(order[0], "rescale")) == 1, order[0]


def test_losing_the_agent_that_hosts_the_store_is_74_naming_it(tmp):
    # No --store-only: the first agent to bind the endpoint hosts the store. Its loss cannot be
    # survived (the job's state is gone); any other loss can.
    nodes = agents(tmp, mn.free_port(), 3, "2:3")
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on all 3 agents")
        host = next(n for n in nodes if events(n, "store")[0]["role"] == "host")
        others = [n for n in nodes if n is not host]
        kill_agent(host)
        codes = [n.wait(60) for n in others]
    finally:
        mn.finish(nodes)
    assert codes == [74, 74], others
    for n in others:
        err = n.text()[1]
        assert "lost the store" in err or "could not re-form" in err, n


def test_node_failure_limit_2_quarantines_the_failing_node(tmp):
    store = Store()
    nodes = []
    try:
        for k in range(3):
            env = mn.clean_env(DDP_FAIL_HERE="1") if k == 2 else None
            args = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{store.port}", "--rdzv_id", "nf",
                    "--nnodes", "2:3", "--nproc_per_node", 1, "--max_restarts", 5, "--rdzv_conf", FAST,
                    "--node-failure-limit", 2,
                    mn.WORKER, "fail_here:9"]
            nodes.append(mn.Node(tmp, f"agent{k}", args, env=env))
        bad, good = nodes[2], nodes[:2]
        assert bad.wait(120) == 9, bad
        assert mn.finish(good, timeout=120) == [0, 0], good
    finally:
        mn.finish(nodes)
        store.close()
    excluded = events(bad, "excluded")
    assert len(excluded) == 1 and excluded[0]["reason"] == "node_failure_limit", bad
    assert "quarantined: its workers failed 2 attempts in a row (node_failure_limit 2)" in bad.text()[1], bad
    assert len(events(bad, "restart")) == 1, bad  # attempt 0 restarted; attempt 1 quarantined it
    for node in good:
        rescale = events(node, "rescale")
        assert len(rescale) == 1 and rescale[0]["old_world_size"] == 3 and rescale[0]["new_world_size"] == 2, node
        assert "quarantined" in rescale[0]["reason"], node
        last = [mn.fields(l) for l in mn.worker_lines(node) if mn.fields(l)["restart"] == "2"]
        assert len(last) == 1 and last[0]["world"] == "2", node


def test_a_restart_whose_other_node_vanished_ends_74_naming_it(tmp):
    """The chaos harness's seed-19 end: node A's worker fails (a restart is left); node B's agent is
    SIGKILLed while it stops its workers, before it rejoins. A, alone in the restart's round of a
    2:3 job, ends 74 naming B once B's old heartbeat stands still, not 69 at join_timeout (30 s)."""
    store = Store()
    nodes = []
    try:
        for k, env in enumerate([mn.clean_env(DDP_FAIL_HERE="1"), None]):
            args = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{store.port}", "--rdzv_id", "gone",
                    "--nnodes", "2:3", "--nproc_per_node", 1, "--max_restarts", 1, "--rdzv_conf", FAST,
                    mn.WORKER, "fail_or_linger:3"]
            nodes.append(mn.Node(tmp, f"agent{k}", args, env=env))
        failing, vanishing = nodes
        wait_until(lambda: "MN TERM" in vanishing.text()[0], 60, "node B stopping its workers")
        kill_agent(vanishing)
        code = failing.wait(60)
    finally:
        mn.finish(nodes)
        store.close()
    err = failing.text()[1]
    assert code == 74, failing
    assert "could not restart the job" in err and "while the job restarted" in err, failing
    assert "1 node can meet, fewer than the minimum of 2" in err, failing
    assert len(events(failing, "restart")) == 1, failing


def worker_fields(node, restart):
    return [mn.fields(l) for l in mn.worker_lines(node) if mn.fields(l)["restart"] == str(restart)]


def test_three_at_2_3_lose_one_and_a_new_agent_grows_the_job_back_to_3(tmp):
    store = Store()
    nodes = agents(tmp, store.port, 3, "2:3", mode="sleep_until:2")
    newcomer = None
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on all 3 agents")
        order = sorted(nodes, key=lambda n: group_rank(n, 0))
        kill_agent(order[1])
        survivors = [order[0], order[2]]
        wait_until(lambda: all(n.started_workers() == 2 for n in survivors), 30, "re-formed workers")
        arrived_at = time.monotonic()
        newcomer = agents(tmp, store.port, 1, "2:3", mode="sleep_until:2", first=3)[0]
        everyone = survivors + [newcomer]
        wait_until(lambda: all(n.started_workers() == 3 for n in survivors) and newcomer.started_workers() == 1,
                   30, "the grown job's workers")
        grown_at = time.monotonic()
        assert mn.finish(everyone) == [0, 0, 0], everyone
    finally:
        mn.finish(nodes + ([newcomer] if newcomer else []))
        store.close()
    assert len(events(newcomer, "pending")) == 1, newcomer
    assert group_rank(newcomer, 2) == 2, newcomer  # after the old nodes, in the round it was invited to
    for new_rank, node in enumerate(everyone):
        last = worker_fields(node, 2)
        assert len(last) == 1 and last[0]["world"] == "3" and last[0]["group"] == f"{new_rank}/3", node
    for node in survivors:
        rescale = events(node, "rescale")
        assert [e["change"] for e in rescale] == ["loss", "admit"], node
        assert rescale[1]["old_world_size"] == 2 and rescale[1]["new_world_size"] == 3, node
        assert len(events(node, "summary")[-1]["membership_changes"]) == 2, node
    assert "admitting 1 pending node" in survivors[0].text()[1], survivors[0]
    print(f"  new agent started -> 3 nodes' workers running: {grown_at - arrived_at:.2f} s "
          f"(heartbeat_interval 0.3 s; re-form round, workers stopped -> formed: {events(survivors[0], 'rescale')[1]['seconds']:.2f} s)")


def test_2_2_with_a_spare_loses_one_and_stays_at_2(tmp):
    store = Store()
    nodes = agents(tmp, store.port, 2, "2:2", mode="sleep_once")
    spare = None
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both agents")
        spare = agents(tmp, store.port, 1, "2:2", mode="sleep_once", first=2)[0]
        wait_until(lambda: events(spare, "spare"), 30, "the third agent waiting as a spare")
        assert spare.started_workers() == 0, spare
        order = sorted(nodes, key=lambda n: group_rank(n, 0))
        killed_at = kill_agent(order[1])
        everyone = [order[0], spare]
        wait_until(lambda: order[0].started_workers() == 2 and spare.started_workers() == 1, 30,
                   "the survivor's and the spare's workers")
        back_at = time.monotonic()
        assert mn.finish(everyone) == [0, 0], everyone
    finally:
        mn.finish(nodes + ([spare] if spare else []))
        store.close()
    assert group_rank(spare, 1) == 1, spare
    for new_rank, node in enumerate(everyone):
        last = worker_fields(node, 1)
        assert len(last) == 1 and last[0]["world"] == "2" and last[0]["group"] == f"{new_rank}/2", node
    rescale = events(order[0], "rescale")
    assert len(rescale) == 1 and rescale[0]["change"] == "spare", order[0]
    assert rescale[0]["old_world_size"] == 2 and rescale[0]["new_world_size"] == 2, order[0]
    assert "and spare" in order[0].text()[1], order[0]
    print(f"  kill -> survivor's and spare's workers running: {back_at - killed_at:.2f} s (heartbeat_timeout 2 s)")


def test_exclude_hosts_refuses_a_late_join_from_an_excluded_host(tmp):
    store = Store()
    flag = os.path.join(tmp, "finish")
    nodes = agents(tmp, store.port, 2, "1:3", mode=f"until:{flag}", extra=["--exclude-hosts", "127.0.0.9,bad"])
    late = None
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both agents")
        late = agents(tmp, store.port, 1, "1:3", mode="ok", first=2, extra=["--local_addr", "127.0.0.9"])[0]
        assert late.wait(60) == 69, late
        open(flag, "w").close()
        assert mn.finish(nodes) == [0, 0], nodes
    finally:
        open(flag, "w").close()
        mn.finish(nodes + ([late] if late else []))
        store.close()
    err = late.text()[1]
    assert "host '127.0.0.9' is excluded from this job (--exclude-hosts)" in err, late
    assert late.started_workers() == 0, late
    node0 = next(n for n in nodes if group_rank(n, 0) == 0)
    excluded = events(node0, "excluded")
    assert len(excluded) == 1 and excluded[0]["host"] == "127.0.0.9", node0
    assert all(len(events(n, "rescale")) == 0 for n in nodes), nodes


def test_exclude_hosts_naming_this_node_refuses_to_start(tmp):
    node = agents(tmp, 1, 1, "1:3", mode="ok", extra=["--local_addr", "bad", "--exclude-hosts", "x,bad"])[0]
    assert node.wait(30) == 69, node
    err = node.text()[1].strip().splitlines()
    assert err == ["ddprun: host 'bad' is excluded from this job (--exclude-hosts)"], node


def test_static_job_with_spares_1_replaces_a_lost_node(tmp):
    port = mn.free_port()
    conf = mn.FAST + ",spares=1"

    def static(name, rank, mode):
        args = ["--nnodes", 2, "--node_rank", rank, "--nproc_per_node", 1, "--master_addr", "127.0.0.1",
                "--master_port", port, "--rdzv_conf", conf, mn.WORKER, mode]
        return mn.Node(tmp, name, args)

    nodes = [static("node0", 0, "sleep_once"), static("node1", 1, "sleep_once")]
    spare = None
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both nodes")
        spare = static("spare", 1, "sleep_once")  # the rank it gives is not used: it waits
        wait_until(lambda: events(spare, "spare"), 30, "the spare waiting")
        kill_agent(nodes[1])
        assert mn.finish([nodes[0], spare]) == [0, 0], [nodes[0], spare]
    finally:
        mn.finish(nodes + ([spare] if spare else []))
    assert group_rank(spare, 1) == 1, spare
    for node in (nodes[0], spare):
        last = worker_fields(node, 1)
        assert len(last) == 1 and last[0]["world"] == "2", node
    assert [e["change"] for e in events(nodes[0], "rescale")] == ["spare"], nodes[0]


def test_admit_restart_lets_a_pending_agent_in_at_the_next_restart(tmp):
    store = Store()
    flag = os.path.join(tmp, "fail")
    conf = FAST + ",admit=restart"
    mode = f"fail_when:{flag}"
    nodes = agents(tmp, store.port, 2, "1:3", conf=conf, mode=mode, extra=["--max_restarts", 1])
    late = None
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both agents")
        late = agents(tmp, store.port, 1, "1:3", conf=conf, mode=mode, first=2, extra=["--max_restarts", 1])[0]
        wait_until(lambda: events(late, "pending"), 30, "the third agent pending")
        time.sleep(1)  # several monitor ticks: admit=restart must not re-form for it
        assert all(n.started_workers() == 1 for n in nodes) and late.started_workers() == 0, nodes + [late]
        open(flag, "w").close()  # rank 0 fails: the restart's round takes the pending agent
        everyone = nodes + [late]
        assert mn.finish(everyone) == [0, 0, 0], everyone
    finally:
        open(flag, "w").close()
        mn.finish(nodes + ([late] if late else []))
        store.close()
    for node in everyone:
        last = worker_fields(node, 1)
        assert len(last) == 1 and last[0]["world"] == "3", node
    assert all(len(events(n, "restart")) == 1 for n in nodes), nodes
    assert all([e["change"] for e in events(n, "rescale")] == ["admit"] for n in nodes), nodes


if __name__ == "__main__":
    main(globals())

