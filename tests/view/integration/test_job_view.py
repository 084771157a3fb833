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
from harness import DDPRUN, Skip, clean_env, main, read_events, wait_until  # noqa: E402
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


def start_job(tmp, etcd=None, extra_args=(), **extra_env):
    endpoint = mn.free_port()
    stop = os.path.join(tmp, "stop")
    env = clean_env(STOP_FILE=stop, **extra_env)
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
                "--status-port", 0, *extra_args, worker]
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


MIB = 1 << 20


def test_cpu_and_memory_of_every_rank_on_every_view(tmp):
    """Per-rank CPU and memory (docs/health.md, "CPU and memory"): on each node one rank (1 and
    3) keeps a core busy half the time and holds 200 MiB, the other idles. Node 0's and node 1's
    /status give every rank's cpu_percent and rss_bytes, node 0's page draws them in its cpu and
    memory columns and `ddprun top --once` at 80 columns in its CPU and MEM columns: the busy
    ranks of both nodes stand out from the idle ones."""
    nodes, stop = start_job(tmp, HOG_RANKS="1,3")
    a, b = nodes
    browser = None
    try:
        wait_until(lambda: a.started_workers() == 2 and b.started_workers() == 2, 30,
                   f"workers on both nodes\n{a}\n{b}")
        wait_until(lambda: status_port(b), 30, "node b's status endpoint")
        port_a, port_b = status_port(a), status_port(b)
        port0, port1 = ((port_a, port_b) if get(port_a, "status")["job"]["node_rank"] == 0
                        else (port_b, port_a))

        def usage(port):
            return {r["rank"]: (r.get("cpu_percent"), r.get("rss_bytes"))
                    for r in get(port, "status")["ranks"]}

        def told_apart(port):
            u = usage(port)
            if sorted(u) != [0, 1, 2, 3] or any(c is None or m is None for c, m in u.values()):
                return None
            busy = all(u[r][0] > 25 and u[r][1] > 150 * MIB for r in (1, 3))
            idle = all(u[r][0] < 20 and u[r][1] < 100 * MIB for r in (0, 2))
            return u if busy and idle else None

        for port in (port0, port1):
            wait_until(lambda: told_apart(port), 40, f"CPU and memory told apart on :{port}\n"
                       f"{usage(port)}")
        u = told_apart(port0) or usage(port0)
        print("  node 0's /status: " + ", ".join(
            f"rank {r} {c} % {m // MIB} MiB" for r, (c, m) in sorted(u.items()) if m))

        def mib(text):  # "200M", "1.2G", "9.5M"
            return float(text[:-1]) * {"K": 1 / 1024, "M": 1, "G": 1024}[text[-1]]

        def top_once():
            """{rank: fields} of one `top --once` frame at 80 columns when it tells the busy ranks
            from the idle ones (CPU is a 1 s sample: a loaded machine may blur one frame)."""
            once = subprocess.run([DDPRUN, "top", "--once", str(port0)], capture_output=True,
                                  text=True, env=clean_env(COLUMNS=80, LINES=24, NO_COLOR=1),
                                  timeout=30)
            assert once.returncode == 0, once
            assert all(len(line) <= 80 for line in once.stdout.splitlines()), once.stdout
            head = [l.split() for l in once.stdout.splitlines() if l.split()[:2] == ["NODE", "RANK"]]
            assert head and head[0][7:9] == ["CPU", "MEM"], once.stdout
            rows = {int(f[1]): f for f in (l.split() for l in once.stdout.splitlines())
                    if len(f) > 8 and f[0].isdigit() and f[1].isdigit()}
            assert sorted(rows) == [0, 1, 2, 3], once.stdout
            for r in (1, 3):
                assert mib(rows[r][8]) > 150, once.stdout
            for r in (0, 2):
                assert mib(rows[r][8]) < 100, once.stdout
            cpu = {r: int(f[7].rstrip("%")) if f[7] != "-" else -1 for r, f in rows.items()}
            return once.stdout if min(cpu[1], cpu[3]) > max(cpu[0], cpu[2]) else None
        frames = []
        wait_until(lambda: frames.append(top_once()) or frames[-1], 30,
                   "top --once telling the busy ranks' CPU from the idle ones'")

        chromium = cdp.find_chromium()
        if chromium:
            browser = cdp.Browser(1280, 900)
            browser.navigate(f"http://127.0.0.1:{port0}/")
            browser.wait_for("(window.ddprunRenders || 0) >= 1", 30, "the first render")
            heads = browser.evaluate(
                "[...document.querySelectorAll('table thead th')]"
                ".map(t => t.textContent)")
            assert "cpu" in heads and "memory" in heads, heads
            rows_js = """[...document.querySelectorAll('tr.rank')].map(r => ({
              rank: +r.dataset.rank, node: +r.dataset.node,
              cpu: parseFloat(r.querySelector('td.cpu').textContent),
              cpuText: r.querySelector('td.cpu').textContent,
              mem: r.querySelector('td.mem').textContent}))"""
            # CPU is a 1 s sample: wait for a render where both busy ranks are above both idle ones.
            browser.wait_for(f"(rs => Math.min(rs[1].cpu, rs[3].cpu) > Math.max(rs[0].cpu, rs[2].cpu))"
                             f"(Object.fromEntries({rows_js}.map(r => [r.rank, r])))", 30,
                             "the page telling the busy ranks' CPU from the idle ones'")
            page = browser.evaluate(rows_js)
            shown = {r["rank"]: r for r in page}
            assert sorted(shown) == [0, 1, 2, 3], page
            assert {shown[r]["node"] for r in (2, 3)} == {1}, page
            for r in (1, 3):
                assert shown[r]["mem"].endswith(" MiB") and float(shown[r]["mem"][:-4]) > 150, page
            for r in (0, 2):
                assert shown[r]["mem"].endswith(" MiB") and float(shown[r]["mem"][:-4]) < 100, page
            assert all(r["cpuText"].endswith(" %") for r in page), page
    finally:
        if browser:
            browser.close()
        open(stop, "w").close()
        mn.finish(nodes)


def test_root_cause_first_the_stopped_ranks_under_it(tmp):
    """Secondary failures under the root cause (docs/health.md, "Root cause first"): a c10d job of
    two agents; rank 3 (node 1) fails at step 40 with an error file, rank 0 (node 0) then exits 1
    on its own as a collective does when its peer died (or is stopped first, whichever comes
    first), the others are stopped by ddprun. Both nodes' /status (served after the end), node
    0's page and `top --once` show rank 3 as the failure and the others as stopped because of it,
    never as failures of their own."""
    mark = os.path.join(tmp, "rank3-failed")
    nodes, stop = start_job(tmp, extra_args=["--status-linger", 30], FAIL_ONCE_RANK=3,
                            FAIL_AT_STEP=40, FAIL_MARK=mark, PEER_RANK=0,
                            FAIL_MESSAGE="ValueError: loss is NaN")
    a, b = nodes
    browser = None
    try:
        wait_until(lambda: status_port(a) and status_port(b), 30, f"both endpoints\n{a}\n{b}")
        port_a, port_b = status_port(a), status_port(b)
        port0, port1 = ((port_a, port_b) if get(port_a, "status")["job"]["node_rank"] == 0
                        else (port_b, port_a))
        get(port1, "status")  # a viewer on both: they serve the end (--status-linger)

        def ended(port):
            s = get(port, "status")
            return s if s.get("job", {}).get("state") == "failed" else None
        wait_until(lambda: ended(port0) and ended(port1), 60, "the job's failed end on both nodes")
        time.sleep(2)  # node 1's last record reaches node 0
        for port, here in ((port0, 0), (port1, 1)):
            s = get(port, "status")
            ranks = {r["rank"]: r for r in s["ranks"] if r.get("node_rank", here) == here}
            failures = s["failures"]
            print(f"  node {here}: ranks " + ", ".join(
                f"{r} exit {v['exit']} stopped {v['stopped_by_ddprun']}" for r, v in sorted(ranks.items()))
                  + "; failures " + ", ".join(
                f"rank {f['rank']} root {f['root_cause']} by {f['caused_by']}" for f in failures))
            roots = [f for f in failures if f["root_cause"]]
            assert [(f["rank"], f["node_rank"]) for f in roots] in ([(3, 1)], []), failures
            if here == 1:
                assert roots and roots[0]["message"] == "ValueError: loss is NaN", failures
                assert failures[0] is roots[0], failures  # the root cause first
                assert ranks[3]["exit"] == "3" and not ranks[3]["stopped_by_ddprun"], ranks
                assert ranks[2]["stopped_by_ddprun"] and ranks[2]["exit"] == "SIGTERM", ranks
            else:
                assert ranks[1]["stopped_by_ddprun"] and ranks[1]["exit"] == "SIGTERM", ranks
                # Rank 0 was stopped, or failed on its own after rank 3: then under it.
                mine = [f for f in failures if f["rank"] == 0]
                assert ranks[0]["stopped_by_ddprun"] or mine, (ranks, failures)
                for f in mine:
                    assert not f["root_cause"] and f["caused_by"]["node_rank"] == 1, f
                    assert f["caused_by"]["rank"] == 3 or "rank 3" in f["caused_by"]["text"], f
                    if roots:
                        assert failures.index(roots[0]) < failures.index(f), failures
                        assert f["caused_by"]["rank"] == 3, f

        once = subprocess.run([DDPRUN, "top", "--once", str(port0)], capture_output=True,
                              text=True, env=clean_env(COLUMNS=120, LINES=30, NO_COLOR=1),
                              timeout=30)
        rows = {int(f[1]): f for f in (l.split() for l in once.stdout.splitlines())
                if len(f) > 5 and f[0].isdigit() and f[1].isdigit()}
        assert rows[1][4] == "stopped", once.stdout
        assert rows[0][4] in ("stopped", "failed"), once.stdout

        if cdp.find_chromium():
            browser = cdp.Browser(1280, 900)
            browser.navigate(f"http://127.0.0.1:{port1}/")
            browser.wait_for("(window.ddprunRenders || 0) >= 1", 30, "the first render")
            page = browser.evaluate("""(() => ({
              rows: [...document.querySelectorAll('tr.rank')].map(r => ({
                rank: +r.dataset.rank, node: +r.dataset.node,
                state: r.querySelector('td.state').textContent,
                flags: r.querySelector('td.flags').textContent})),
              failures: [...document.querySelectorAll('.failure')].map(f => ({
                cls: f.className, what: f.querySelector('.what').textContent}))}))()""")
            browser.screenshot(os.path.join(ARTEFACTS, "dashboard-root-cause.png"))
            shown = {r["rank"]: r for r in page["rows"] if r["node"] == 1}
            assert shown[3]["state"] == "failed", page
            assert shown[2]["state"] == "stopped", page
            assert "because of rank 3 (node 1)" in shown[2]["flags"], page
            zero = [r for r in page["rows"] if r["rank"] == 0]
            if zero and zero[0]["state"] == "failed":  # rank 0 failed after rank 3: so flagged
                assert "because of rank 3 (node 1)" in zero[0]["flags"], page
            assert page["failures"][0]["cls"] == "failure root", page
            assert "rank 3" in page["failures"][0]["what"], page
            assert "root cause" in page["failures"][0]["what"], page
            for f in page["failures"][1:]:
                assert "consequence" in f["cls"], page
                assert "stopped because of rank 3 (node 1)" in f["what"], page
    finally:
        if browser:
            browser.close()
        open(stop, "w").close()
        mn.finish(nodes)


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
    gives a running rank's stderr, and the page draws the failure as text; its log viewer shows
    a clicked rank's stderr, and its stdout at the switch."""
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
            # The log viewer: a click on rank 1's row shows its stderr; the switch its stdout.
            browser.evaluate("document.querySelector('tr.rank[data-rank=\"1\"]').click()")
            browser.wait_for("!document.getElementById('log-box').hidden && "
                             "document.getElementById('log-stream').textContent === 'stderr'",
                             15, "rank 1's stderr")
            browser.evaluate("document.getElementById('show-stdout').click()")
            browser.wait_for("document.getElementById('log-stream').textContent === 'stdout' && "
                             "document.getElementById('log').textContent.includes("
                             "'stepper rank=1 world=2 restart=1')", 15, "rank 1's stdout")
            assert browser.evaluate(
                "document.getElementById('show-stdout').getAttribute('aria-pressed')") == "true"
            browser.evaluate("document.getElementById('show-stderr').click()")
            browser.wait_for("document.getElementById('log-stream').textContent === 'stderr' && "
                             "!document.getElementById('log').textContent.includes('stepper rank=1')",
                             15, "back to rank 1's stderr")
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
