# SPDX-License-Identifier: MIT
"""Every node's ranks on every node's views (docs/health.md, "Every node's ranks"): a real c10d
job of two ddprun agents on 127.0.0.1 (2 ranks each, workers reporting steps on the heartbeat
socket), both with --status-port. Each node's /status lists the other node's ranks with their
step advancing, steps/s and a heartbeat age, and "job_nodes" says both are up; node 0's
dashboard in headless chromium draws node 1's ranks with their steps and, after a reload, the
steps/s history the server kept (GET /history). Then node 1's agent is SIGKILLed: node 0's
/status marks node 1 and its ranks lost while it serves the end."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import Skip, clean_env, main, read_events, wait_until  # noqa: E402
import test_multinode as mn  # noqa: E402
import cdp  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "..", "support"))
from etcd_cluster import ETCD, EtcdCluster  # noqa: E402

ARTEFACTS = os.environ.get("VIEW_ARTEFACTS", os.getcwd())


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=5) as r:
        return json.load(r)


def status_port(node):
    try:
        found = [e for e in read_events(node.events) if e.get("event") == "status"]
    except (OSError, ValueError):
        return None
    return found[0]["port"] if found else None


def start_job(tmp, etcd=None):
    endpoint = mn.free_port()
    stop = os.path.join(tmp, "stop")
    env = clean_env(STOP_FILE=stop)
    worker = os.path.join(HERE, "stepper.py")
    nodes = []
    for name in ("a", "b"):
        if etcd:  # node ranks on arrival; node 0 hosts the workers' store
            where = ["--rdzv_backend", "etcd", "--rdzv_endpoint", etcd.endpoints, "--rdzv_id",
                     "jobview", "--local_addr", "127.0.0.1", "--master_port", 0]
        else:
            where = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{endpoint}",
                     "--rdzv_id", "jobview"]
        args = [*where, "--nnodes", 2, "--nproc_per_node", 2, "--rdzv_conf", mn.FAST,
                "--status-port", 0, worker]
        nodes.append(mn.Node(tmp, name, args, env=env))
        nodes[-1].store_port = None if etcd else endpoint
        if name == "a":  # the first binds the endpoint and hosts the store: node 0
            wait_until(lambda: status_port(nodes[0]), 30, "node a's status endpoint")
    return nodes, stop


def others(status, here):
    # An older ddprun's ranks have no node_rank: they are this node's.
    return [r for r in status["ranks"] if r.get("node_rank", here) != here]


def test_every_node_shows_every_rank_and_a_lost_node(tmp, etcd=None):
    nodes, stop = start_job(tmp, etcd)
    a, b = nodes
    browser = None
    try:
        wait_until(lambda: a.started_workers() == 2 and b.started_workers() == 2, 30,
                   f"workers on both nodes\n{a}\n{b}")
        wait_until(lambda: status_port(b), 30, "node b's status endpoint")
        port_a, port_b = status_port(a), status_port(b)
        here_a = get(port_a, "status")["job"]["node_rank"]
        here_b = get(port_b, "status")["job"]["node_rank"]
        assert {here_a, here_b} == {0, 1}, (here_a, here_b)
        zero, one = (a, b) if here_a == 0 else (b, a)
        port0, port1 = (port_a, port_b) if here_a == 0 else (port_b, port_a)

        # Node 0's /status: node 1's two ranks, their steps advancing.
        def remote_steps(port, here):
            rows = others(get(port, "status"), here)
            return {r["rank"]: r["last_step"] for r in rows if r.get("last_step") is not None}

        wait_until(lambda: len(remote_steps(port0, 0)) == 2, 30,
                   f"node 1's ranks with steps on node 0\n{get(port0, 'status')}")
        first = remote_steps(port0, 0)
        wait_until(lambda: all(remote_steps(port0, 0)[r] > first[r] for r in first), 30,
                   "node 1's steps advancing on node 0")
        s0 = get(port0, "status")
        rows = others(s0, 0)
        assert sorted(r["rank"] for r in rows) == [2, 3], rows
        for r in rows:
            assert r["node_rank"] == 1 and r["remote"] is True and r["state"] == "running", r
            assert r["host"] and r["pid"] > 0, r
            assert 0 <= r["last_progress_age_s"] < 10, r
            assert r["exit"] is None, r
        local = [r for r in s0["ranks"] if r["node_rank"] == 0]
        assert sorted(r["rank"] for r in local) == [0, 1], s0["ranks"]
        assert [(n["node_rank"], n["state"]) for n in s0["job_nodes"]] == [(0, "up"), (1, "up")]
        # steps/s from the server's own samples (10 steps/s per rank; a loaded machine is slower).
        wait_until(lambda: all((r.get("steps_per_s") or 0) > 1 for r in get(port0, "status")["ranks"]),
                   30, f"steps/s on every rank\n{get(port0, 'status')['ranks']}")
        # And node 1 shows node 0's ranks: every node's view is job-wide.
        wait_until(lambda: len(remote_steps(port1, 1)) == 2, 30, "node 0's ranks on node 1")
        assert sorted(remote_steps(port1, 1)) == [0, 1]

        # The server's history: bounded, every rank's samples.
        h = get(port0, "history")
        assert h["keep"] == 120, h
        series = {(r["node_rank"], r["rank"]): r["samples"] for r in h["ranks"]}
        assert set(series) == {(0, 0), (0, 1), (1, 2), (1, 3)}, series.keys()
        assert all(2 <= len(s) <= 120 for s in series.values()), series

        chromium = cdp.find_chromium()
        if chromium:
            browser = cdp.Browser(1280, 900)
            url = f"http://127.0.0.1:{port0}/"
            browser.navigate(url)
            browser.wait_for("(window.ddprunRenders || 0) >= 1", 30, "the first render")
            page = browser.evaluate("""(() => {
              const rows = [...document.querySelectorAll('tr.rank')].map(r => ({
                rank: +r.dataset.rank, node: +r.dataset.node,
                cells: [...r.cells].map(c => c.textContent),
                spark: r.querySelectorAll('polyline').length}));
              const samples = history.get('1/2') || [];
              return {rows, renders: window.ddprunRenders, samples: samples.length,
                      groups: [...document.querySelectorAll('tr.group')].map(g => [g.dataset.node, g.dataset.state])};
            })()""")
            browser.screenshot(os.path.join(ARTEFACTS, "dashboard-job-view.png"))
            remote = [r for r in page["rows"] if r["node"] == 1]
            assert sorted(r["rank"] for r in remote) == [2, 3], page
            for r in remote:
                # node, rank, local, pid, state, step, steps/s, chart, age, flags, exit
                assert r["cells"][4] == "running", r
                assert r["cells"][5].isdigit() and int(r["cells"][5]) > 0, r
                assert r["cells"][6] != "—" and r["cells"][8].endswith(" s"), r
                assert r["spark"] == 1, r  # a chart at once: the server's history
            # More samples than the page could have taken itself: they came from /history.
            assert page["samples"] > page["renders"] + 1, page
            assert ["1", "up"] in page["groups"], page

        # Node 1 vanishes: node 0 marks it and its ranks lost, and serves that end.
        os.kill(one.proc.pid, 9)

        def lost_on_zero():
            try:
                s = get(port0, "status")
            except OSError:
                return None
            n1 = [n for n in s.get("job_nodes", []) if n["node_rank"] == 1]
            lost_ranks = [r for r in others(s, 0) if r["state"] == "lost"]
            return s if n1 and n1[0]["state"] == "lost" and len(lost_ranks) == 2 else None

        seen = []
        wait_until(lambda: seen.append(lost_on_zero()) or seen[-1], 20,
                   "node 1 lost on node 0's /status")
        s = seen[-1]
        print(f"  node 0 after the loss: job {s['job']['state']}, nodes {s['job_nodes']}")
        assert zero.wait(60) != 0, zero
    finally:
        if browser:
            browser.close()
        open(stop, "w").close()
        mn.finish(nodes)


def test_etcd_every_node_shows_every_rank_and_a_lost_node(tmp):
    """The same on --rdzv_backend etcd (a real 1-member etcd): the records travel as etcd keys."""
    if not os.path.exists(ETCD):
        raise Skip("etcd is not installed (Debian: etcd-server)")
    with EtcdCluster(1) as cluster:
        test_every_node_shows_every_rank_and_a_lost_node(tmp, cluster)


def bytes_received(pid, port):
    """{local address: bytes received} of pid's TCP connections to 127.0.0.1:port (ss -ti)."""
    out = subprocess.run(["ss", "-tinpH", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True).stdout.splitlines()
    conns = {}
    for head, info in zip(out[::2], out[1::2]):
        if f"pid={pid}," not in head:
            continue
        got = [w for w in info.split() if w.startswith("bytes_received:")]
        conns[head.split()[2]] = int(got[0].split(":")[1]) if got else 0
    return conns


def test_a_strangers_huge_view_record_is_not_fetched_every_second(tmp):
    """A stranger on the store (no token) keeps writing 4 MiB under node 0's view key (an
    agent never writes more than 64 KiB there). Node 1's agent reads the records: it learns the
    size from the reply's length, drops that connection without taking the 4 MiB, says so in one
    line and does not read that key again in the round: its bytes read grow by far less than one
    such record while the stranger goes on (before: every heartbeat fetched it, then ignored it)."""
    sys.path.insert(0, os.path.join(HERE, "..", "..", "rendezvous", "bounds"))
    import wire
    nodes, stop = start_job(tmp)
    a, b = nodes
    stranger = None
    try:
        wait_until(lambda: a.started_workers() == 2 and b.started_workers() == 2, 30,
                   f"workers on both nodes\n{a}\n{b}")
        wait_until(lambda: status_port(b), 30, "node b's status endpoint")
        zero, one = (a, b) if get(status_port(a), "status")["job"]["node_rank"] == 0 else (b, a)
        wait_until(lambda: len(others(get(status_port(one), "status"), 1)) == 2, 30,
                   "node 0's ranks on node 1")
        stranger = wire.G2Client(one.store_port)

        def exists(k):  # CHECK: 0 ready, 1 not ready
            stranger.s.sendall(wire.g2("CHECK", wire.keys(k)))
            return wire.recv_exact(stranger.s, 1) == b"\0"
        keys = [f"/ddprun/jobview/{r}/view/0" for r in range(4)]  # G2 keys start with /
        key = next((k for k in keys if exists(k)), None)
        assert key, "node 0's view key in rounds 0-3"
        huge = b"[" * (4 << 20)
        # What node 1's agent receives from the store, per connection (a dropped one is not
        # forgotten: its last count stays in `most`).
        start = bytes_received(one.proc.pid, one.store_port)
        assert start, "node 1's connections to the store"
        most = dict(start)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            stranger.set(key, huge)
            assert stranger.ping()
            for conn, n in bytes_received(one.proc.pid, one.store_port).items():
                most[conn] = max(most.get(conn, 0), n)
            time.sleep(0.2)
        grown = sum(n - start.get(conn, 0) for conn, n in most.items())
        print(f"  node 1's agent received {grown} bytes in 5 s of a stranger's 4 MiB record")
        assert grown < (2 << 20), grown
        out, err = one.text()
        lines = [l for l in err.splitlines() if "view record of node 0" in l]
        assert len(lines) == 1 and "larger than 65536 bytes" in lines[0], err[-3000:]
        # The job goes on: node 1 is fine, node 0's ranks are simply not shown there.
        assert get(status_port(one), "status")["phase"] == "running"
        assert one.proc.poll() is None and zero.proc.poll() is None
    finally:
        if stranger:
            stranger.close()
        open(stop, "w").close()
        mn.finish(nodes)


def test_failures_with_message_traceback_and_log_tail_on_the_view(tmp):
    """One node, 2 ranks, --max_restarts 1: rank 1 fails in attempt 0 with an error file. The
    restarted job's /status keeps that failure (message, traceback, stderr tail), GET /log/<rank>
    gives a running rank's stderr, and the page draws the failure as text."""
    stop = os.path.join(tmp, "stop")
    message = "ValueError: bad batch <img src=x onerror=alert(1)> \x1b]0;pwned\x07"
    env = clean_env(STOP_FILE=stop, FAIL_ONCE_RANK=1, FAIL_MESSAGE=message)
    node = mn.Node(tmp, "single", ["--nproc_per_node", 2, "--max_restarts", 1, "--status-port", 0,
                                   os.path.join(HERE, "stepper.py")], env=env)
    browser = None
    try:
        wait_until(lambda: node.started_workers() == 4, 60, f"the restart\n{node}")
        port = status_port(node)
        s = get(port, "status")
        assert [(f["attempt"], f["rank"], f["exit"]) for f in s["failures"]] == [(0, 1, "3")], s
        f = s["failures"][0]
        assert f["message"] == message, f
        assert f["traceback"].startswith("Traceback (most recent call last):"), f
        assert f["traceback"].endswith(message), f
        assert any("about to fail at step 10" in line for line in f["stderr_tail"]), f
        assert f["node_rank"] == 0 and f["host"], f
        assert s["failures_dropped"] == 0, s
        log = get(port, "log/1")
        assert log["rank"] == 1 and log["stream"] == "stderr" and log["attempt"] == 1, log
        assert isinstance(log["lines"], list), log
        # And its stdout: the line it printed at start (once the restarted rank has printed it).
        wait_until(lambda: any(line.startswith("stepper rank=1 world=2 restart=1")
                               for line in get(port, "log/1/stdout")["lines"]), 30,
                   f"rank 1's stdout line: {get(port, 'log/1/stdout')}")
        out = get(port, "log/1/stdout")
        assert out["rank"] == 1 and out["stream"] == "stdout" and out["attempt"] == 1, out
        try:
            get(port, "log/99")
            raise AssertionError("a rank not on this node has no log")
        except urllib.error.HTTPError as e:
            assert e.code == 404, e
        if cdp.find_chromium():
            browser = cdp.Browser(1280, 900)
            browser.navigate(f"http://127.0.0.1:{port}/")
            browser.wait_for("(window.ddprunRenders || 0) >= 1", 30, "the first render")
            page = browser.evaluate("""(() => ({
              failures: [...document.querySelectorAll('.failure')].map(f => ({
                what: f.querySelector('.what').textContent,
                traceback: (f.querySelector('pre.traceback') || {}).textContent,
                stderr: (f.querySelector('pre.stderr') || {}).textContent})),
              hidden: document.getElementById('failures-box').hidden,
              imgs: document.querySelectorAll('img').length}))()""")
            browser.screenshot(os.path.join(ARTEFACTS, "dashboard-failures.png"))
            assert not page["hidden"] and len(page["failures"]) == 1, page
            shown = page["failures"][0]
            # The page shows the job's control characters as \uXXXX text (asText), never raw.
            visible = message.replace("\x1b", "\\u001b").replace("\x07", "\\u0007")
            assert "attempt 0 · rank 1" in shown["what"] and visible in shown["what"], shown
            assert "\x1b" not in shown["what"] + shown["traceback"], shown
            assert shown["traceback"] == f["traceback"].replace("\x1b", "\\u001b").replace(
                "\x07", "\\u0007"), shown
            assert "about to fail" in shown["stderr"], shown
            assert page["imgs"] == 0, page  # the job's text stays text
        open(stop, "w").close()
        assert node.wait(60) == 0, node
    finally:
        if browser:
            browser.close()
        open(stop, "w").close()
        mn.finish([node])


if __name__ == "__main__":
    main(globals())
