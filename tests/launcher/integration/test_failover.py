# SPDX-License-Identifier: MIT
"""A standby store (--rdzv_endpoint PRIMARY,STANDBY, docs/scale.md): three real c10d agents at
2:3 on 127.0.0.1; the first to bind the primary endpoint hosts the store, and once the first round
formed another agent binds the standby endpoint and hosts the standby, which replicates it.
SIGKILLing the primary's host (its agent, and with it the store) makes the survivors promote the
standby, re-form without the lost node on it and finish with 0; the standby logs one promotion.
Real processes, real sockets, the job's token on every store (the agents prove it to promote the
standby; a standby without it is refused by its primary)."""
import os
import time

from harness import clean_env, main, run, start, stop, wait_until
import test_elastic as el
import test_multinode as mn

TOKEN = "failover-test-token-3f9a"


def test_losing_the_primarys_host_promotes_the_standby_and_the_job_finishes(tmp):
    env = clean_env(DDPRUN_RDZV_TOKEN=TOKEN)
    primary, standby_port = mn.free_port(), mn.free_port()
    endpoint = f"127.0.0.1:{primary},127.0.0.1:{standby_port}"
    nodes = []
    try:
        for k in range(3):
            args = ["--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", "fo",
                    "--nnodes", "2:3", "--nproc_per_node", 1, "--rdzv_conf", el.FAST, mn.WORKER,
                    "sleep_once"]
            late_if = os.path.join(tmp, f"agent{k}.late")
            nodes.append(mn.Node(tmp, f"agent{k}", args, env={**env, "DDP_LATE_IF": late_if}))
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on all 3 agents")
        host = next(n for n in nodes if el.events(n, "store")[0]["role"] == "host")
        # One agent other than the primary's hosts the standby; it follows once subscribed.
        wait_until(lambda: any(el.events(n, "standby_store") for n in nodes), 30, "a standby store")
        standby_hosts = [n for n in nodes if el.events(n, "standby_store")]
        assert len(standby_hosts) == 1, [el.events(n, "standby_store") for n in nodes]
        standby_host = standby_hosts[0]
        assert standby_host is not host, "the standby must not share the primary's host"
        hosted = el.events(standby_host, "standby_store")[0]
        assert hosted["role"] == "host" and hosted["address"] == f"127.0.0.1:{standby_port}", hosted
        assert hosted["following"] == f"127.0.0.1:{primary}", hosted
        wait_until(lambda: "standby: following" in standby_host.text()[1], 30, "the standby's subscription")
        # The standby's host finishes last: it now serves the job's store, so it must stay until
        # the other survivor (waiting in the exit barrier) has read the outcome.
        open(os.path.join(tmp, f"agent{nodes.index(standby_host)}.late"), "w").close()
        survivors = [n for n in nodes if n is not host]
        killed_at = el.kill_agent(host)
        wait_until(lambda: all(n.started_workers() == 2 for n in survivors), 60, "re-formed workers")
        back_at = time.monotonic()
        assert mn.finish(survivors, timeout=60) == [0, 0], survivors
    finally:
        mn.finish(nodes)
    standby_log = standby_host.text()[1]
    assert standby_log.count("promoted to primary at epoch 2") == 1, standby_log
    for node in survivors:
        failover = el.events(node, "store_failover")
        assert len(failover) == 1, node
        assert failover[0]["to"] == f"127.0.0.1:{standby_port}" and failover[0]["epoch"] == 2, node
        assert "the standby store at" in node.text()[1] and "took over (epoch 2" in node.text()[1], node
        rescale = el.events(node, "rescale")
        assert len(rescale) == 1 and rescale[0]["old_world_size"] == 3, node
        assert rescale[0]["new_world_size"] == 2, node
        second = [mn.fields(l) for l in mn.worker_lines(node) if mn.fields(l)["restart"] == "1"]
        assert len(second) == 1 and second[0]["world"] == "2", node
        assert second[0]["master"] == f"127.0.0.1:{standby_port}", node  # workers use the new store
        assert second[0]["token_seen"] == "False", node
        assert el.events(node, "summary")[-1]["exit_code"] == 0, node
    print(f"  kill -> survivors' workers running on the standby: {back_at - killed_at:.2f} s "
          f"(heartbeat_timeout 2 s, twice: the store, then its host)")


def test_a_standby_that_is_not_there_ends_the_job_with_74(tmp):
    # The standby was named on an address no agent can bind (TEST-NET-1), so none serves it: the
    # store's loss is still the end, said in one line.
    primary, standby_port = mn.free_port(), mn.free_port()
    endpoint = f"127.0.0.1:{primary},192.0.2.1:{standby_port}"
    nodes = []
    try:
        for k in range(2):
            args = ["--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", "fo2",
                    "--nnodes", "2:3", "--nproc_per_node", 1, "--rdzv_conf", el.FAST, mn.WORKER,
                    "sleep_once"]
            nodes.append(mn.Node(tmp, f"agent{k}", args))
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both agents")
        host = next(n for n in nodes if el.events(n, "store")[0]["role"] == "host")
        other = next(n for n in nodes if n is not host)
        el.kill_agent(host)
        assert other.wait(60) == 74, other
    finally:
        mn.finish(nodes)
    err = other.text()[1]
    assert "did not take over" in err and f"192.0.2.1:{standby_port}" in err, other
    assert not any(el.events(n, "standby_store") for n in nodes), "no agent can serve 192.0.2.1"


def test_a_standby_without_the_jobs_token_is_refused_with_69(tmp):
    # The replication keys are protected by the token: a standby must prove it to subscribe
    # (else it would read every key, the rendezvous keys included).
    primary_port = mn.free_port()
    primary = start(["--store-only", "--master_port", primary_port],
                    env=clean_env(DDPRUN_RDZV_TOKEN=TOKEN))
    standby = None
    try:
        assert int(primary.stdout.readline()) == primary_port
        follow = ["--store-only", "--master_port", 0, "--follow", f"127.0.0.1:{primary_port}"]
        no_token = clean_env()
        no_token.pop("DDPRUN_RDZV_TOKEN", None)
        for env, reason in ((no_token, "this standby has none (set DDPRUN_RDZV_TOKEN)"),
                            (clean_env(DDPRUN_RDZV_TOKEN="not-the-job-token"),
                             "wrong or missing rendezvous token")):
            r = run(follow, timeout=60, env=env)
            assert r.rc == 69, r
            assert r.out == "", r  # no port line: it never served
            lines = r.err.strip().splitlines()
            assert len(lines) == 1, r
            assert f"cannot follow 127.0.0.1:{primary_port}" in lines[0] and reason in lines[0], r
        # The same standby with the job's token follows.
        standby = start(follow, env=clean_env(DDPRUN_RDZV_TOKEN=TOKEN))
        assert int(standby.stdout.readline()) > 0
    finally:
        if standby:
            stop(standby)
        stop(primary)


if __name__ == "__main__":
    main(globals())
