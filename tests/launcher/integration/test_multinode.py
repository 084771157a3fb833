# SPDX-License-Identifier: MIT
"""Multi-node ddprun: several ddprun processes on 127.0.0.1 form one job through the agent store
(static and c10d), stop together, restart together, notice a killed node, time out a node that
never comes, and refuse a stranger with the wrong token. Real processes, real sockets."""
import os
import re
import signal
import socket
import struct
import subprocess
import time
from contextlib import contextmanager

from harness import clean_env, main, read_events, start, stop, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "..", "mn_worker.py")
FAST = "heartbeat_interval=0.3,heartbeat_timeout=2,join_timeout=30"


@contextmanager
def pytest_raises(kind):
    try:
        yield
    except kind:
        return
    raise AssertionError(f"expected {kind.__name__}")


def free_port():
    # Only to choose a port for the static nodes; node 0's store binds it and holds it.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, tmp, name, args, env=None, prefix=()):
        self.out_path = os.path.join(tmp, f"{name}.out")
        self.err_path = os.path.join(tmp, f"{name}.err")
        self.events = os.path.join(tmp, f"{name}.events")
        self.out = open(self.out_path, "w")
        self.err = open(self.err_path, "w")
        # prefix: words before ddprun's own options (the netns test runs `ip netns exec NS ddprun`).
        self.proc = start([*prefix, "--events", self.events] + args, env=env, stdout=self.out,
                          stderr=self.err)

    def wait(self, timeout=60):
        try:
            self.proc.wait(timeout=timeout)
        finally:
            stop(self.proc)
            self.out.close()
            self.err.close()
        return self.proc.returncode

    def text(self):
        # UTF-8 whatever the locale (CI runs under C): a failure's message must never fail itself.
        with open(self.out_path, encoding="utf-8", errors="replace") as o, \
                open(self.err_path, encoding="utf-8", errors="replace") as e:
            return o.read(), e.read()

    def started_workers(self):
        try:
            return sum(1 for e in read_events(self.events) if e.get("event") == "worker_start")
        except (OSError, ValueError):
            return 0

    def __repr__(self):
        out, err = self.text()
        return f"rc={self.proc.returncode}\n--- stdout ---\n{out[-2000:]}\n--- stderr ---\n{err[-3000:]}"


def static_nodes(tmp, nprocs, mode, extra=(), conf=FAST, env=None):
    port = free_port()
    nodes = []
    for k, n in enumerate(nprocs):
        args = ["--nnodes", len(nprocs), "--node_rank", k, "--nproc_per_node", n, "--master_addr",
                "127.0.0.1", "--master_port", port, "--rdzv_conf", conf, *extra, WORKER, mode]
        nodes.append(Node(tmp, f"node{k}", args, env))
    return nodes, port


def finish(nodes, timeout=60):
    try:
        return [n.wait(timeout) for n in nodes]
    finally:
        for n in nodes:
            stop(n.proc)


def worker_lines(node):
    return [l for l in node.text()[0].splitlines() if " MN " in l or l.split(":", 1)[-1].startswith("MN ")]


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split("MN ", 1)[1].split())


def test_static_heterogeneous_ranks(tmp):
    nodes, port = static_nodes(tmp, [2, 1, 3], "ok")
    assert finish(nodes) == [0, 0, 0], nodes
    seen = {}
    for k, node in enumerate(nodes):
        for line in worker_lines(node):
            f = fields(line)
            seen[int(f["rank"])] = (k, f)
    assert sorted(seen) == list(range(6)), seen
    # Contiguous per node, in node-rank order: node 0 -> 0,1; node 1 -> 2; node 2 -> 3,4,5.
    assert [seen[r][0] for r in range(6)] == [0, 0, 1, 2, 2, 2], seen
    for r, (k, f) in seen.items():
        assert f["world"] == "6" and f["group"] == f"{k}/3" and f["agent_store"] == "True", f
        assert f["master"] == f"127.0.0.1:{port}", f


def test_master_port_0_on_node_0(tmp):
    # Node 0's store binds a port the kernel picks; the other node learns it from node 0's events.
    node0 = Node(tmp, "node0", ["--nnodes", 2, "--node_rank", 0, "--master_port", 0, "--rdzv_conf",
                                FAST, WORKER, "ok"])
    try:
        def store_port():
            try:
                return [e["port"] for e in read_events(node0.events) if e.get("event") == "store"]
            except (OSError, ValueError):
                return []
        wait_until(lambda: store_port(), 30, "node 0's store event")
        port = store_port()[0]
        node1 = Node(tmp, "node1", ["--nnodes", 2, "--node_rank", 1, "--master_port", port,
                                    "--rdzv_conf", FAST, WORKER, "ok"])
        assert finish([node0, node1]) == [0, 0], (node0, node1)
    finally:
        finish([node0])
    assert all(fields(l)["master"] == f"127.0.0.1:{port}" for n in (node0, node1) for l in worker_lines(n))
    bad = Node(tmp, "bad", ["--nnodes", 2, "--node_rank", 1, "--master_port", 0, WORKER, "ok"])
    assert bad.wait(30) == 2 and "--master_port 0 only works" in bad.text()[1], bad


def test_failure_on_node1_stops_node0(tmp):
    nodes, _ = static_nodes(tmp, [2, 1], "fail:2:7")  # rank 2 lives on node 1
    codes = finish(nodes)
    assert codes == [7, 7], nodes
    for node in nodes:
        err = node.text()[1]
        assert "Root cause (whole job): node 1" in err and "rank 2" in err, node
    assert "the job failed on another node" in nodes[0].text()[1], nodes[0]


def test_failure_on_store_host_reaches_node1(tmp):
    # Node 0 hosts the store and fails: it keeps the store up until node 1 has read the cause.
    nodes, _ = static_nodes(tmp, [1, 1], "fail:0:5")
    assert finish(nodes) == [5, 5], nodes
    assert "Root cause (whole job): node 0" in nodes[1].text()[1], nodes[1]


def test_single_node_store_is_loopback_only(tmp):
    node = Node(tmp, "single", [WORKER, "ok"])
    assert node.wait(30) == 0, node
    store = [e for e in read_events(node.events) if e.get("event") == "store"]
    assert store and store[0]["role"] == "host" and store[0]["address"] == "127.0.0.1", store
    assert fields(worker_lines(node)[0])["master"] == f"127.0.0.1:{store[0]['port']}", node


def test_restart_on_every_node(tmp):
    nodes, _ = static_nodes(tmp, [1, 2], "fail_once", extra=["--max_restarts", "1"])
    assert finish(nodes) == [0, 0], nodes
    for node in nodes:
        restarts = sorted({fields(l)["restart"] for l in worker_lines(node)})
        assert restarts == ["0", "1"], node
        assert "restarting the workers on every node" in node.text()[1], node
    # Attempt 1 ran with TORCHELASTIC_RESTART_COUNT=1 on both nodes, all three ranks.
    again = sorted(int(fields(l)["rank"]) for n in nodes for l in worker_lines(n) if fields(l)["restart"] == "1")
    assert again == [0, 1, 2], nodes


def test_killed_node_is_named(tmp):
    nodes, _ = static_nodes(tmp, [1, 1], "sleep")
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both nodes")
        os.kill(nodes[1].proc.pid, signal.SIGKILL)  # the agent only: as if its machine vanished
        t0 = time.monotonic()
        code = nodes[0].wait(30)
        noticed = time.monotonic() - t0
    finally:
        finish(nodes)
    assert code == 74, nodes[0]
    assert "lost node 1" in nodes[0].text()[1], nodes[0]
    print(f"  node 0 ended {noticed:.2f} s after node 1's agent was SIGKILLed (heartbeat_timeout=2)")


def test_killed_store_host_is_named(tmp):
    nodes, _ = static_nodes(tmp, [1, 1], "sleep")
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both nodes")
        os.kill(nodes[0].proc.pid, signal.SIGKILL)
        code = nodes[1].wait(30)
    finally:
        finish(nodes)
    assert code == 74, nodes[1]
    assert "lost the store" in nodes[1].text()[1], nodes[1]


def test_store_lost_during_exit_barrier(tmp):
    # Issue 8 item 13: node 1's workers are done and it waits in the exit barrier when the store's
    # host vanishes. That is a lost store (exit 74, no restart), not "failed on another node"
    # followed by a join retry until join_timeout (600 s here, far beyond the wait below).
    nodes, _ = static_nodes(tmp, [1, 1], "done:1", extra=["--max_restarts", "1"],
                            conf="heartbeat_interval=0.3,heartbeat_timeout=2")

    def node1_done():
        try:
            return any(e.get("event") == "worker_exit" for e in read_events(nodes[1].events))
        except (OSError, ValueError):
            return False
    try:
        wait_until(node1_done, 30, "node 1's worker to finish")
        os.kill(nodes[0].proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        code = nodes[1].wait(30)
        noticed = time.monotonic() - t0
    finally:
        finish(nodes)
    print(f"  node 1 ended {noticed:.2f} s after the store's host was SIGKILLed (heartbeat_timeout=2)")
    err = nodes[1].text()[1]
    assert code == 74, nodes[1]
    assert "lost the store" in err and "failed on another node" not in err, nodes[1]
    assert "restarting" not in err, nodes[1]


def test_node_that_never_arrives(tmp):
    port = free_port()
    node = Node(tmp, "node0", ["--nnodes", 3, "--node_rank", 0, "--master_port", port,
                               "--rdzv_conf", "join_timeout=2", WORKER, "ok"])
    code = node.wait(30)
    err = node.text()[1]
    assert code == 69, node
    assert "1 of 3 node(s) arrived" in err and "missing node rank(s): 1, 2" in err, node


def test_wrong_token_is_refused(tmp):
    env_good = clean_env(DDPRUN_RDZV_TOKEN="s3cret")
    port = free_port()
    common = ["--nnodes", 2, "--master_port", port, "--rdzv_conf", FAST]
    node0 = Node(tmp, "node0", common + ["--node_rank", 0, WORKER, "ok"], env_good)
    stranger = Node(tmp, "stranger", common + ["--node_rank", 1, "--rdzv_conf",
                                               FAST + ",token=wrong", WORKER, "ok"], env_good)
    try:
        assert stranger.wait(30) == 69, stranger
        assert "wrong or missing rendezvous token" in stranger.text()[1], stranger
        node1 = Node(tmp, "node1", common + ["--node_rank", 1, WORKER, "ok"], env_good)
        assert finish([node0, node1]) == [0, 0], (node0, node1)
    finally:
        finish([node0])
    assert "wrong rendezvous token" in node0.text()[1], node0


class HostileClient:
    """A stranger on the store port: raw c10d TCPStore (torch 2.x) frames, no token."""
    VALIDATE, SET, GET, LIST_KEYS, PING = 0, 1, 3, 17, 13

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(bytes([self.VALIDATE]) + struct.pack("<I", 0x3C85F7CE) +
                          bytes([self.PING]) + struct.pack("<I", 0x00FF1234))
        assert struct.unpack("<I", self.recv(4))[0] == 0x00FF1234

    def recv(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the store closed the connection")
            data += chunk
        return data

    @staticmethod
    def blob(b):
        return struct.pack("<Q", len(b)) + b

    def recv_blob(self):
        return self.recv(struct.unpack("<Q", self.recv(8))[0])

    def list_keys(self):
        self.sock.sendall(bytes([self.LIST_KEYS]))
        return [self.recv_blob().decode() for _ in range(struct.unpack("<q", self.recv(8))[0])]

    def set(self, key, value):
        self.sock.sendall(bytes([self.SET]) + self.blob(key.encode()) + self.blob(value.encode()))

    def get(self, key):
        self.sock.sendall(bytes([self.GET]) + self.blob(key.encode()))
        return self.recv_blob().decode()

    def closed_by_store(self):
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def test_stranger_cannot_read_or_stop_a_token_job(tmp):
    # Issue 8 items 14 and 15: with a token, a stranger on the store port sees none of the
    # rendezvous keys (no join records to guess the token from offline), and its forged stop
    # ("exit 0") is refused: the job runs to its real end.
    release = os.path.join(tmp, "release")
    env = clean_env(DDPRUN_RDZV_TOKEN="s3cret")
    nodes, port = static_nodes(tmp, [1, 1], f"until:{release}", env=env)
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both nodes")
        spy = HostileClient(port)
        listed = spy.list_keys()
        assert not [k for k in listed if "ddprun" in k], listed
        with pytest_raises(ConnectionError):
            spy.get("/ddprun/none/0/join/1")
        forger = HostileClient(port)
        forger.set("/ddprun/none/0/stop", "0|forged by a stranger")
        forger.set("/ddprun/none/0/end", "stop")
        assert forger.closed_by_store()
        open(release, "w").close()
        codes = finish(nodes)
    finally:
        finish(nodes)
    assert codes == [0, 0], nodes
    for node in nodes:
        assert "forged" not in node.text()[1] and "another node" not in node.text()[1], node
        assert not [e for e in read_events(node.events) if e.get("event") == "job_stop"], node


def test_forged_stop_without_token_cannot_choose_success(tmp):
    # Issue 8 item 14: without a token anyone on the port can stop the job (docs/rendezvous.md
    # says so), but never make it end "successfully": a stop's exit code is 1..255.
    nodes, port = static_nodes(tmp, [1, 1], "sleep")
    try:
        wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both nodes")
        forger = HostileClient(port)
        forger.set("/ddprun/none/0/stop", "0|forged by a stranger")
        codes = finish(nodes)
    finally:
        finish(nodes)
    assert codes == [1, 1], nodes
    assert all("forged by a stranger" in n.text()[1] for n in nodes), nodes


def test_token_never_reaches_the_workers(tmp):
    # Issue 8 item 16: neither DDPRUN_RDZV_TOKEN nor PET_RDZV_CONF's token= is passed on.
    env = clean_env(DDPRUN_RDZV_TOKEN="s3cret", PET_RDZV_CONF=f"token=s3cret,{FAST}")
    nodes, _ = static_nodes(tmp, [1, 1], "ok", conf=FAST, env=env)
    assert finish(nodes) == [0, 0], nodes
    lines = [l for n in nodes for l in worker_lines(n)]
    assert len(lines) == 2 and all(fields(l)["token_seen"] == "False" for l in lines), lines


def listening_addresses(port):
    """Local addresses of LISTEN sockets on `port`, from /proc/net/tcp (IPv4)."""
    found = []
    with open("/proc/net/tcp") as f:
        for row in f.readlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:
                found.append(socket.inet_ntoa(struct.pack("<I", int(addr, 16))))
    return found


def test_store_binds_the_host_name_it_was_given(tmp):
    # Issue 8 item 17: --master_addr as a host name binds what the name resolves to, not every
    # interface; --rdzv_conf store_bind=0.0.0.0 asks for every interface.
    name = socket.gethostname()
    resolved = socket.gethostbyname(name)
    for conf, expected in ((FAST, resolved), (FAST + ",store_bind=0.0.0.0", "0.0.0.0")):
        release = os.path.join(tmp, f"release-{expected}")
        port = free_port()
        nodes = [Node(tmp, f"bind{k}-{expected}", ["--nnodes", 2, "--node_rank", k, "--master_addr", name,
                                                   "--master_port", port, "--rdzv_conf", conf, WORKER,
                                                   f"until:{release}"]) for k in (0, 1)]
        try:
            wait_until(lambda: all(n.started_workers() == 1 for n in nodes), 30, "workers on both nodes")
            bound = listening_addresses(port)
            open(release, "w").close()
            codes = finish(nodes)
        finally:
            finish(nodes)
        assert codes == [0, 0], nodes
        assert bound == [expected], (bound, expected)


def test_settings_that_differ_end_every_node(tmp):
    # Issue 8 item 18: --max_restarts 1 on node 0 and 0 on node 1 ends both at the join with one
    # line naming the setting, both values and both nodes (not a lone restart and a join_timeout).
    port = free_port()
    conf = "heartbeat_interval=0.3,heartbeat_timeout=2"  # join_timeout: the default 600 s
    nodes = [Node(tmp, f"node{k}", ["--nnodes", 2, "--node_rank", k, "--master_port", port, "--rdzv_conf",
                                    conf, "--max_restarts", 1 - k, WORKER, "ok"]) for k in (0, 1)]
    codes = finish(nodes)
    assert codes == [69, 69], nodes
    line = "--max_restarts differs between nodes: 1 on node 0 ("
    for node in nodes:
        err = node.text()[1]
        assert line in err and ") but 0 on node 1 (" in err, node
        assert node.started_workers() == 0, node


def test_peer_gives_up_when_the_store_port_refuses(tmp):
    # Issue 8 item 21: nothing listens where node 0's store should be (node 0 failed to open its
    # port, or is gone): node 1 gives up after refused_timeout naming the cause, not at the
    # 600 s join_timeout.
    node1 = Node(tmp, "node1", ["--nnodes", 2, "--node_rank", 1, "--master_port", free_port(),
                                "--rdzv_conf", "refused_timeout=2", WORKER, "ok"])
    assert node1.wait(60) == 69, node1
    assert "refused every connection" in node1.text()[1], node1


def test_two_jobs_on_one_derived_port_end_promptly(tmp):
    # Issue 8 item 21: another job's store holds the port job B derived. B's node 0 cannot open
    # it (exit 69); B's node 1 reaches the other job's store, where node 0 never shows up, and
    # ends too, saying so, instead of waiting out join_timeout.
    other = subprocess.Popen([os.environ["DDPRUN"], "--store-only", "--master_port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        port = int(other.stdout.readline())
        common = ["--nnodes", 2, "--master_port", port, "--rdzv_id", "jobB", "--rdzv_conf", "refused_timeout=2"]
        nodes = [Node(tmp, f"jobB{k}", common + ["--node_rank", k, WORKER, "ok"]) for k in (0, 1)]
        codes = finish(nodes)
    finally:
        stop(other)
    assert codes == [69, 69], nodes
    assert "address already in use" in nodes[0].text()[1], nodes[0]
    assert "node 0 has not joined on the store" in nodes[1].text()[1], nodes[1]


def c10d_jobs(tmp, port, jobs, env=None):
    nodes = []
    for job in jobs:
        for k, n in enumerate([1, 2]):
            args = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", job,
                    "--nnodes", "1:2", "--nproc_per_node", n, "--rdzv_conf", FAST, WORKER, "ok"]
            nodes.append(Node(tmp, f"{job}{k}", args, env))
    assert finish(nodes) == [0] * len(nodes), nodes
    for j in range(len(jobs)):
        pair = nodes[2 * j:2 * j + 2]
        ranks = sorted(int(fields(l)["rank"]) for n in pair for l in worker_lines(n))
        assert ranks == [0, 1, 2], pair
        assert all(fields(l)["world"] == "3" for n in pair for l in worker_lines(n)), pair


def test_c10d_ranks_on_arrival(tmp):
    # The first agent to bind the endpoint hosts the store; node ranks follow arrival.
    c10d_jobs(tmp, free_port(), ["solo"])


def test_c10d_with_a_token(tmp):
    # The agent that binds the endpoint hosts the store with the token policy; the other proves
    # the token on each of its connections.
    c10d_jobs(tmp, free_port(), ["tok"], env=clean_env(DDPRUN_RDZV_TOKEN="c10d-secret"))


def test_c10d_two_jobs_on_one_store(tmp):
    # --rdzv_id keeps two jobs apart on one store (here a separate `ddprun --store-only`, since
    # an agent's store lives only as long as its own job).
    store = subprocess.Popen([os.environ["DDPRUN"], "--store-only", "--master_port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        c10d_jobs(tmp, int(store.stdout.readline()), ["jobA", "jobB"])
    finally:
        stop(store)


def test_port_in_use(tmp):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        scratch = os.path.join(tmp, "scratch")
        os.mkdir(scratch)
        node = Node(tmp, "single", ["--master_port", port, WORKER, "ok"],
                    env=dict(os.environ, TMPDIR=scratch))
        code = node.wait(30)
    assert code == 69, node
    assert os.listdir(scratch) == [], "the failed start left its temporary run directory behind"
    err = node.text()[1]
    assert str(port) in err and "--standalone" in err and len(err.strip().splitlines()) == 1, node


def test_store_only(tmp):
    proc = subprocess.Popen([os.environ["DDPRUN"], "--store-only", "--master_port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        port = int(proc.stdout.readline())
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        stop(proc)


def test_store_only_bad_input_and_program_arguments(tmp):
    ddprun = os.environ["DDPRUN"]
    bad_port = subprocess.run([ddprun, "--store-only", "--master_port", "99999"],
                              capture_output=True, text=True, timeout=10)
    assert bad_port.returncode == 2, bad_port
    assert bad_port.stderr.strip().splitlines() == [
        "ddprun: --store-only: --master_port must be 0..65535, got '99999'"]
    with_program = subprocess.run([ddprun, "--store-only", "/bin/true"],
                                  capture_output=True, text=True, timeout=10)
    assert with_program.returncode == 2, with_program
    assert with_program.stderr.strip() == "ddprun: --store-only takes no program"
    # The standby replication is gone (issue 21): its flags are unknown (exit 2, one line), and a
    # second store in --rdzv_endpoint points to the etcd backend.
    for args in (["--store-only", "--master_port", "0", "--follow", "127.0.0.1:1"],
                 ["--store-only", "--master_port", "0", "--follower-ack-timeout", "1"],
                 ["--store-only", "--master_port", "0", "--max-follower-lag-bytes", "1"]):
        r = subprocess.run([ddprun, *args], capture_output=True, text=True, timeout=10)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and r.stdout == "" and len(lines) == 1 and args[3] in lines[0], (args, r)
    r = subprocess.run([ddprun, "--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:1,127.0.0.1:2",
                        "--nproc_per_node=1", "/bin/true"], capture_output=True, text=True, timeout=10)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r
    assert "names more than one store" in lines[0] and "--rdzv_backend etcd" in lines[0], lines
    # After the program, --store-only is the program's own argument, not ddprun's.
    passed = subprocess.run([ddprun, "--nproc_per_node=1", "/bin/echo", "--store-only"],
                            capture_output=True, text=True, timeout=30)
    assert passed.returncode == 0, passed
    assert passed.stdout.strip().endswith("--store-only"), passed.stdout


if __name__ == "__main__":
    main(globals())
