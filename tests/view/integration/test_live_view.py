# SPDX-License-Identifier: MIT
"""Seeing a running job (docs/health.md, "Seeing a job"): a real static 2-node job on 127.0.0.1
(2 ranks per node, `spares=1`), rank 1 made slow (a straggler), node 1's agent SIGKILLed and a
spare taking its place. Node 0's dashboard at / is loaded in Debian's headless chromium: the DOM
shows the rank rows, the slow rank flagged and first, the lost node, the timeline's entries; the
page asks for nothing but its own status port; a screenshot is kept. `ddprun top` runs under a
real tmux on the same job; `ddprun report` reads node 0's events file afterwards."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import DDPRUN, Skip, clean_env, main, read_events, wait_until  # noqa: E402
import test_multinode as mn  # noqa: E402
import cdp  # noqa: E402

ARTEFACTS = os.environ.get("VIEW_ARTEFACTS", os.getcwd())
DOCS = os.environ.get("VIEW_DOCS_DIR")  # set: the screenshots for docs/ are written there too


def events(node, kind):
    try:
        return [e for e in read_events(node.events) if e.get("event") == kind]
    except (OSError, ValueError):
        return []


def status(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as r:
        return json.load(r)


def start_job(tmp):
    port = mn.free_port()
    conf = mn.FAST + ",spares=1"
    stop = os.path.join(tmp, "stop")
    env = clean_env(SLOW_RANK=1, STOP_FILE=stop, DDPRUN_STRAGGLER_WINDOW=2)
    worker = os.path.join(HERE, "stepper.py")

    def static(name, rank, extra=()):
        args = ["--nnodes", 2, "--node_rank", rank, "--nproc_per_node", 2, "--master_addr",
                "127.0.0.1", "--master_port", port, "--rdzv_conf", conf, "--local_addr",
                f"127.0.0.{rank + 1 if name != 'spare' else 3}", *extra, worker]
        return mn.Node(tmp, name, args, env=env)

    node0 = static("node0", 0, ["--status-port", 0, "--straggler-ratio", "0.5"])
    node1 = static("node1", 1)
    return node0, node1, static, stop


def test_dashboard_top_and_report_of_a_job_that_lost_a_node(tmp):
    chromium = cdp.find_chromium()
    if not chromium or not shutil.which("tmux"):
        raise Skip("needs chromium and tmux")
    node0, node1, static, stop = start_job(tmp)
    nodes = [node0, node1]
    browser = None
    tmux = f"ddprun-top-{os.getpid()}"
    try:
        wait_until(lambda: node0.started_workers() == 2 and node1.started_workers() == 2, 30,
                   "workers on both nodes")
        spare = static("spare", 1)
        nodes.append(spare)
        wait_until(lambda: events(spare, "spare"), 30, "the spare waiting")
        port = events(node0, "status")[0]["port"]
        wait_until(lambda: events(node0, "straggler"), 30, "rank 1 found a straggler")
        os.kill(node1.proc.pid, 9)  # the agent only: as if its machine vanished
        wait_until(lambda: events(node0, "rescale") and node0.started_workers() == 4, 30,
                   "node 0 re-formed with the spare")
        wait_until(lambda: any(r["straggler"] for r in status(port)["ranks"]), 30,
                   "rank 1 flagged again in the new attempt")

        # The dashboard in a real browser.
        browser = cdp.Browser(1280, 900)
        url = f"http://127.0.0.1:{port}/"
        browser.navigate(url)
        browser.wait_for("(window.ddprunRenders || 0) >= 3", 30, "three polls rendered")
        page = browser.evaluate("""(() => {
          const rows = [...document.querySelectorAll('tr.rank')].map(r => ({
            rank: +r.dataset.rank, node: +r.dataset.node,
            cells: [...r.cells].map(c => c.textContent),
            straggler: !!r.querySelector('.straggler')}));
          return {rows,
            nodes: [...document.querySelectorAll('.node')].map(n => [n.dataset.state, n.textContent]),
            timeline: [...document.querySelectorAll('#timeline-svg g.ev')].map(g => g.dataset.event),
            eventLines: [...document.querySelectorAll('#events .event')].map(e => e.textContent),
            job: document.getElementById('job-id').textContent,
            state: document.getElementById('job-state').textContent,
            world: document.getElementById('job-world').textContent,
            html: document.documentElement.outerHTML.length};
        })()""")
        shot = os.path.join(ARTEFACTS, "dashboard.png")
        browser.screenshot(shot)
        print(f"  screenshot: {shot}")
        ranks = sorted(r["rank"] for r in page["rows"])
        assert ranks == [0, 1, 2, 3], page["rows"]  # node 0's own and node 1's (the spare's)
        local = [r for r in page["rows"] if r["node"] == 0]
        assert local[0]["rank"] == 1 and local[0]["straggler"], local  # the slow rank first
        assert not [r for r in page["rows"] if r["straggler"] and r["rank"] != 1], page["rows"]
        states = [s for s, _ in page["nodes"]]
        assert "lost" in states and states.count("running") == 2, page["nodes"]
        for kind in ("rendezvous", "worker_start", "spare", "straggler", "node_lost", "rescale"):
            assert kind in page["timeline"], (kind, page["timeline"])
        assert page["world"] == "4", page
        assert "running" in page["state"], page
        urls = browser.requested_urls()
        assert urls and all(u.startswith(url) for u in urls), urls
        assert f"{url}status" in urls, urls

        # `ddprun top` in a real terminal (tmux), found from this directory's beacon.
        subprocess.run(["tmux", "kill-session", "-t", tmux], capture_output=True)
        subprocess.run(["tmux", "new-session", "-d", "-s", tmux, "-x", "100", "-y", "30",
                        "env -i PATH=/usr/bin:/bin TERM=xterm HOME=/tmp bash --norc --noprofile"],
                       check=True)
        subprocess.run(["tmux", "send-keys", "-t", tmux,
                        f"cd {tmp} && {DDPRUN} top {port}; echo TOP-EXIT=$?", "Enter"], check=True)

        def pane():
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", tmux], capture_output=True,
                                  text=True).stdout

        wait_until(lambda: "SLOW" in pane() and "lost" in pane(), 30, f"top's frame\n{pane()}")
        time.sleep(2.5)  # two more polls: the step rates
        frame = pane()
        print(frame)
        rows = [line.split() for line in frame.splitlines() if line.split()[:1] in (["0"], ["1"])
                and len(line.split()) > 5 and line.split()[1].isdigit()]
        assert [int(r[1]) for r in rows[:1]] == [1], frame  # the slow rank first
        assert sorted(int(r[1]) for r in rows) == [0, 1, 2, 3], frame  # every node's ranks
        with open(os.path.join(ARTEFACTS, "top.txt"), "w") as f:
            f.write(frame)
        subprocess.run(["tmux", "send-keys", "-t", tmux, "q"], check=True)
        wait_until(lambda: "TOP-EXIT=0" in pane(), 10, f"top quits on q\n{pane()}")
        assert "\x1b" not in pane()
        # The terminal's settings came back (canonical input and echo).
        subprocess.run(["tmux", "send-keys", "-t", tmux,
                        "stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e echo -e -icanon -e -echo "
                        "| sort | tr '\\n' , ; echo", "Enter"], check=True)
        wait_until(lambda: "echo,icanon," in pane(), 10, f"icanon and echo back\n{pane()}")

        # --once, found without an argument (this directory's beacon), NO_COLOR.
        once = subprocess.run([DDPRUN, "top", "--once"], cwd=os.getcwd(), capture_output=True, text=True,
                              env=clean_env(COLUMNS=80, LINES=24, NO_COLOR=1), timeout=30)
        assert once.returncode == 0, once
        lines = once.stdout.splitlines()
        assert all(len(line) <= 80 for line in lines) and len(lines) <= 24, once.stdout
        assert "\x1b" not in once.stdout and "ddprun top" in lines[0], once.stdout
        assert "lost" in once.stdout and "SLOW" in once.stdout, once.stdout
        if DOCS:
            render_terminal_png(browser, frame, os.path.join(DOCS, "top.png"))
            browser.navigate(url)
            browser.wait_for("(window.ddprunRenders || 0) >= 3", 30)
            browser.screenshot(os.path.join(DOCS, "dashboard.png"))

        open(stop, "w").close()
        assert mn.finish([node0, spare], timeout=60) == [0, 0], (node0, spare)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", tmux], capture_output=True)
        if browser:
            browser.close()
        open(stop, "w").close()
        mn.finish(nodes)

    # The events file of this elastic run, as a report.
    html = os.path.join(ARTEFACTS, "report-elastic.html")
    r = subprocess.run([DDPRUN, "report", node0.events, "-o", html], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "", r
    md = subprocess.run([DDPRUN, "report", node0.events, "--format", "md"], capture_output=True,
                        text=True)
    assert md.returncode == 0, md
    assert "**Root cause:** none: the job succeeded" in md.stdout, md.stdout
    assert "re-formed (spare)" in md.stdout and "is a straggler" in md.stdout, md.stdout


def render_terminal_png(browser, frame, path):
    """The tmux frame as a PNG for docs/ (the captured text, drawn by chromium as a terminal)."""
    import html as h
    page = ("<body style='margin:0;background:#1d2330'><pre style='margin:0;padding:8px;"
            "color:#e6e9ef;font:13px/1.25 monospace'>" + h.escape(frame) + "</pre></body>")
    browser.navigate("data:text/html;charset=utf-8," + urllib.request.quote(page))
    browser.wait_for("document.querySelector('pre') !== null", 10)
    browser.screenshot(path)


if __name__ == "__main__":
    main(globals())
