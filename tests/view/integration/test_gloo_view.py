# SPDX-License-Identifier: MIT
"""A real 2-node gloo training job seen from node 0 (docs/health.md, "Every node's ranks"): two
ddprun agents on 127.0.0.1 (c10d, `--preload torch`, 2 ranks each, `--max_restarts 1`) run
tests/health/integration/jobs/gloo_steps.py: an all_reduce per step, each step sent to ddprun's
heartbeat socket. Node 0's dashboard in headless chromium, at four moments, each a screenshot in
the artefact directory (and in VIEW_DOCS_DIR when set, for docs/img/) and DOM checks:
* start: the page renders the job;
* mid-run: node 1's ranks 2 and 3 with steps, and those steps increasing on the next polls;
* after a failure and restart: rank 3 (node 1) raised ValueError under torch's @record; after
  the restart node 0's page shows node 1's failure with its message and traceback (published in
  node 1's view record) and the other node's ranks stepping again in attempt 1 (c10d numbers
  the new round's nodes by arrival: the two agents may swap node ranks); then `ddprun top`
  under a real tmux at 80x24 and 200x50 lists the other node's ranks with steps going up;
* the end: every rank stops together (a stop file, agreed in the all_reduce), the page shows
  "succeeded, exit code 0", and the status endpoint keeps serving that end during the linger."""
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import DDPRUN, Skip, clean_env, main, wait_until  # noqa: E402
import test_multinode as mn  # noqa: E402
import cdp  # noqa: E402
from test_job_view import get, status_port  # noqa: E402  (one copy of the /status helpers)

# A node is lost after 6 s without a heartbeat, not the multinode tests' 2 s: on a loaded 2-core
# machine an agent descheduled for 2-3 s ended this job 74 instead of restarting it (a breaker saw
# it twice with SIGSTOP); what this test checks is the views, not loss detection.
RDZV_CONF = mn.FAST.replace("heartbeat_timeout=2", "heartbeat_timeout=6")

ARTEFACTS = os.environ.get("VIEW_ARTEFACTS", os.getcwd())
DOCS = os.environ.get("VIEW_DOCS_DIR")  # set: the screenshots for docs/ are written there too
JOB = os.path.join(HERE, "..", "..", "health", "integration", "jobs", "gloo_steps.py")
MESSAGE = "loss is NaN at step 1234 (rank 3, batch 17)"
WIDTH, HEIGHT = 1000, 700
LINGER_S = 8


def have_torch():
    return subprocess.run(["python3", "-c", "import torch.distributed"],
                          capture_output=True).returncode == 0


def shot(browser, name):
    path = os.path.join(ARTEFACTS, f"gloo-{name}.png")
    browser.screenshot(path)
    if DOCS:
        shutil.copyfile(path, os.path.join(DOCS, f"gloo-{name}.png"))
    print(f"  screenshot: {path}", flush=True)


# The rank rows as node 0's page draws them: node, rank, and the cells
# (node, rank, local, pid, state, step, steps/s, chart, age, flags, exit).
ROWS = """[...document.querySelectorAll('tr.rank')].map(r => ({
  rank: +r.dataset.rank, node: +r.dataset.node, cells: [...r.cells].map(c => c.textContent)}))"""


def remote_steps(browser, other):
    steps = {}
    for r in browser.evaluate(ROWS):
        if r["node"] == other and r["cells"][5].isdigit():
            steps[r["rank"]] = int(r["cells"][5])
    return steps


def renders(browser):
    return browser.evaluate("window.ddprunRenders || 0")


def top_rows(frame):
    """{rank: (node, state, step)} from a frame of `ddprun top` (NODE RANK LOCAL PID STATE STEP)."""
    rows = {}
    for line in frame.splitlines():
        f = line.split()
        if len(f) > 5 and f[0].isdigit() and f[1].isdigit() and f[2].isdigit():
            rows[int(f[1])] = (int(f[0]), f[4], f[5])
    return rows


def top_in_tmux(name, cols, lines, port, other):
    """`ddprun top PORT` in a real tmux of cols x lines: its frame once the other node's ranks
    show steps (a second frame later: the steps went up), then `q`."""
    subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", str(cols), "-y", str(lines),
                    "env -i PATH=/usr/bin:/bin TERM=xterm HOME=/tmp bash --norc --noprofile"],
                   check=True)

    def pane():
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True,
                              text=True).stdout

    def remote(frame):
        return {rank: int(step) for rank, (node, state, step) in top_rows(frame).items()
                if node == other and state == "running" and step.isdigit()}

    try:
        subprocess.run(["tmux", "send-keys", "-t", name, f"{DDPRUN} top {port}; echo TOP-EXIT=$?",
                        "Enter"], check=True)
        wait_until(lambda: sorted(remote(pane())) == [2 * other, 2 * other + 1], 30,
                   f"top {cols}x{lines} showing node {other}'s ranks\n{pane()}")
        first = remote(pane())
        wait_until(lambda: all(remote(pane()).get(r, -1) > first[r] for r in first), 30,
                   f"node {other}'s steps going up in top {cols}x{lines}\n{pane()}")
        frame = pane()
        lines_seen = frame.splitlines()
        assert len(lines_seen) <= lines and all(len(l) <= cols for l in lines_seen), frame
        assert sorted(top_rows(frame)) == [0, 1, 2, 3], frame  # the whole job, on node 0
        with open(os.path.join(ARTEFACTS, f"gloo-top-{cols}x{lines}.txt"), "w") as f:
            f.write(frame)
        subprocess.run(["tmux", "send-keys", "-t", name, "q"], check=True)
        wait_until(lambda: "TOP-EXIT=0" in pane(), 10, f"top quits on q\n{pane()}")
        return frame
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def test_two_node_gloo_job_seen_from_node_0(tmp):
    if not cdp.find_chromium() or not shutil.which("tmux"):
        raise Skip("needs chromium and tmux")
    if not have_torch():
        raise Skip("needs torch in python3")
    endpoint = mn.free_port()
    stop, fail = os.path.join(tmp, "stop"), os.path.join(tmp, "fail")
    env = clean_env(OMP_NUM_THREADS=1)
    nodes, browser = [], None
    try:
        for name in ("a", "b"):
            args = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{endpoint}",
                    "--rdzv_id", "gloo-view", "--nnodes", 2, "--nproc_per_node", 2,
                    "--rdzv_conf", RDZV_CONF, "--max_restarts", 1, "--preload", "torch",
                    "--status-port", 0, "--status-linger", LINGER_S, JOB, "--steps", 100000,
                    "--step-seconds", 0.2, "--heartbeat", "--stop-file", stop, "--fail-rank", 3,
                    "--fail-file", fail, "--fail-message", MESSAGE]
            nodes.append(mn.Node(tmp, name, args, env=env))
            if name == "a":  # the first binds the endpoint and hosts the store
                wait_until(lambda: status_port(nodes[0]), 30, f"node a's status endpoint\n{nodes[0]}")
        wait_until(lambda: all(status_port(n) for n in nodes), 30, "both status endpoints")
        here = {}

        def node_ranks():  # known once the rendezvous is done
            here.update({n: get(status_port(n), "status")["job"].get("node_rank") for n in nodes})
            return sorted(here.values(), key=str) == [0, 1]
        wait_until(node_ranks, 60, f"both nodes' node ranks: {list(here.values())}")
        zero = [n for n in nodes if here[n] == 0][0]
        port = status_port(zero)
        url = f"http://127.0.0.1:{port}/"

        # Start: the page renders the job before any step.
        browser = cdp.Browser(WIDTH, HEIGHT)
        browser.navigate(url)
        browser.wait_for("(window.ddprunRenders || 0) >= 1", 30, "the first render")
        assert browser.evaluate("document.getElementById('job-id').textContent") == "gloo-view"
        shot(browser, "start")

        # Mid-run: node 1's ranks with steps on node 0's page, going up.
        wait_until(lambda: sorted(remote_steps(browser, 1)) == [2, 3], 90,
                   f"node 1's ranks with steps on node 0's page\n{browser.evaluate(ROWS)}")
        first = remote_steps(browser, 1)
        wait_until(lambda: all(remote_steps(browser, 1).get(r, -1) > first[r] for r in first), 30,
                   "node 1's steps going up on node 0's page")
        rows = browser.evaluate(ROWS)
        assert sorted((r["node"], r["rank"]) for r in rows) == [(0, 0), (0, 1), (1, 2), (1, 3)], rows
        for r in rows:
            assert r["cells"][4] == "running", r
        browser.wait_for("[...document.querySelectorAll('tr.rank')].every(r => "
                         "r.cells[6].textContent !== '—')", 30, "steps/s on every rank")
        shot(browser, "midrun")

        # A failure on node 1 and the restart of the whole job.
        open(fail, "w").close()
        wait_until(lambda: get(port, "status")["attempt"] == 1 and zero.started_workers() == 4, 90,
                   f"the restart on node 0\n{zero}")
        failure = """[...document.querySelectorAll('.failure[data-node="1"][data-rank="3"]')].map(f => ({
          what: f.querySelector('.what').textContent,
          traceback: (f.querySelector('pre.traceback') || {}).textContent || ''}))"""
        one = [n for n in nodes if n is not zero][0]

        def failures_seen():
            out = {}
            for name, p in (("zero", port), ("one", status_port(one))):
                st = get(p, "status")
                out[name] = {"failures": [(f["node_rank"], f["rank"], f["attempt"]) for f in st["failures"]],
                             "job_nodes": st.get("job_nodes"), "here": st["job"].get("node_rank"),
                             "ranks": [(r["node_rank"], r["rank"], r["state"], r.get("last_step")) for r in st["ranks"]]}
            return out
        wait_until(lambda: browser.evaluate(f"{failure}.length > 0"), 30,
                   f"node 1's failure on node 0's page\n{failures_seen()}\n{zero}\n{one}")
        shown = browser.evaluate(failure)[0]
        assert "attempt 0 · rank 3 (node 1" in shown["what"], shown
        assert f"ValueError: {MESSAGE}" in shown["what"] or MESSAGE in shown["what"], shown
        assert shown["traceback"].startswith("Traceback (most recent call last):"), shown
        assert "gloo_steps.py" in shown["traceback"] and MESSAGE in shown["traceback"], shown
        assert not browser.evaluate("document.getElementById('failures-box').hidden")
        # Rank 3's own failure (its peers may have failed after it, of the lost connection), in
        # /status too, once the new round's records are read.
        def raised():
            return [f for f in get(port, "status")["failures"] if (f["node_rank"], f["rank"]) == (1, 3)]
        wait_until(raised, 30, "rank 3's failure in node 0's /status")
        assert [f["attempt"] for f in raised()] == [0], raised()
        assert raised()[0]["remote"] is True and raised()[0]["message"].endswith(MESSAGE), raised()
        # The other node's ranks step again in attempt 1. (c10d numbers the nodes of the new
        # round by arrival: the agent at this page may be node 1 now, the other one node 0.)
        browser.wait_for("document.getElementById('job-attempt').textContent.startsWith('1')", 30,
                         "attempt 1 on the page")
        other = 1 - get(port, "status")["job"]["node_rank"]
        mine = [0, 1] if other == 1 else [2, 3]
        wait_until(lambda: sorted(remote_steps(browser, other)) == [2 * other, 2 * other + 1], 60,
                   f"the other node's ranks stepping after the restart\n{browser.evaluate(ROWS)}")
        again = remote_steps(browser, other)
        wait_until(lambda: all(remote_steps(browser, other).get(r, -1) > again[r] for r in again),
                   30, "the other node's steps going up after the restart")
        rows = browser.evaluate(ROWS)
        assert sorted(r["rank"] for r in rows if r["node"] == 1 - other) == mine, rows
        shot(browser, "restarted")
        # `ddprun top` on node 0 in a real terminal, small and large: node 1's ranks stepping.
        top_in_tmux(f"ddprun-gloo-80-{os.getpid()}", 80, 24, port, other)
        frame = top_in_tmux(f"ddprun-gloo-200-{os.getpid()}", 200, 50, port, other)
        if DOCS:
            import test_live_view
            test_live_view.render_terminal_png(browser, frame, os.path.join(DOCS, "gloo-top.png"))
            browser.navigate(url)
            browser.wait_for("(window.ddprunRenders || 0) >= 1", 30, "the render after the top shot")

        # The end: all ranks stop together; the page shows it and the endpoint serves it.
        open(stop, "w").close()
        ended = "(() => { const e = document.getElementById('ended'); " \
                "return e ? [e.dataset.state, e.dataset.exitCode, e.textContent] : null; })()"
        state = browser.wait_for(ended, 60, "the end on node 0's page")
        assert state[:2] == ["succeeded", "0"], state
        assert "The job ended: succeeded, exit code 0" in state[2], state
        shot(browser, "ended")
        seen_end = time.monotonic()
        # Still served during the linger: a reload draws the same end.
        time.sleep(2)
        s = get(port, "status")
        assert s["job"]["state"] == "succeeded" and s["job"]["exit_code"] == 0, s["job"]
        browser.navigate(url)
        state = browser.wait_for(ended, 10, "the end after a reload during the linger")
        assert state[:2] == ["succeeded", "0"], state
        # Node 1's failure stays on the final page too.
        assert browser.evaluate(f"{failure}.length") == 1
        assert time.monotonic() - seen_end < LINGER_S, "the checks outlasted the linger"
        assert [n.wait(60) for n in nodes] == [0, 0], nodes
    finally:
        if browser:
            browser.close()
        for path in (stop, fail):
            open(path, "w").close()
        mn.finish(nodes)


if __name__ == "__main__":
    main(globals())
