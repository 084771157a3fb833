# SPDX-License-Identifier: MIT
"""Job text on a person's terminal (issue 36, items 1, 2 and 4; docs/health.md, "Job text on a
terminal" and "The end of a job"). A job whose error file's message, traceback and --file-timer
scope id hold a title change (OSC 0 ... BEL), a clipboard write (OSC 52) and a screen clear
(CSI 2J): ddprun's own failure summary and messages, `ddprun top --once` and `ddprun report` (md
and html) show them as text (`^[`, `^G`) and never send a raw ESC or BEL; the worker's own output
line stays byte-identical. The status endpoint keeps serving the final state after the end for
--status-linger (SIGINT cuts it), and answers 421 to a Host that is not its own."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
import cdp  # noqa: E402
from harness import DDPRUN, Skip, clean_env, main, read_events, run, start, stop, wait_until  # noqa: E402

ARTEFACTS = os.environ.get("VIEW_ARTEFACTS", os.getcwd())
HOSTILE = "\x1b]0;pwned\x07|\x1b]52;c;ZWNobyBoaQ==\x07|\x1b[2J\x1b[H"

JOB = r"""
import json, os, sys, time
H = %r
rank = int(os.environ["RANK"])
marker = sys.argv[1]
if rank == 1:
    sys.stdout.write("raw " + H + "\n")  # the worker's own line: passed on byte for byte
    sys.stdout.flush()
    open(marker + ".rank1", "w").close()  # rank 0 fails only after this line is out
    time.sleep(60)
    sys.exit(0)
with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
    json.dump({"message": {"message": "boom " + H,
                           "extraInfo": {"py_callstack": "Traceback " + H, "timestamp": "1"}}}, f)
deadline = time.monotonic() + 60
while not (os.path.exists(marker) and os.path.exists(marker + ".rank1")) and \
        time.monotonic() < deadline:
    time.sleep(0.05)
with open(os.environ["TORCHELASTIC_TIMER_FILE"], "w") as pipe:
    pipe.write(json.dumps({"version": 1, "pid": os.getpid(), "scope_id": "scope " + H,
                           "expiration_time": time.time() - 1, "signal": 9}) + "\n")
time.sleep(60)
""" % HOSTILE


def get(url, host=None, timeout=5):
    req = urllib.request.Request(url)
    if host is not None:
        req.add_header("Host", host)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def status_port(events):
    """The status endpoint's port, from the job's `status` event (waited for, 30 s)."""
    port = []

    def ready():
        if os.path.exists(events):
            port[:] = [e["port"] for e in read_events(events) if e["event"] == "status"]
        return bool(port)
    wait_until(ready, 30, "the status event")
    return port[0]


def raw_controls(text):
    return [c for c in set(text) if c in "\x1b\x07\x9b"]


def test_job_text_never_reaches_a_terminal_raw_and_the_end_stays_served(tmp):
    job = os.path.join(tmp, "job.py")
    with open(job, "w") as f:
        f.write(JOB)
    events = os.path.join(tmp, "events.jsonl")
    marker = os.path.join(tmp, "go")
    proc = start(["--nproc-per-node", "2", "--file-timer", "--status-port", "0",
                  "--status-linger", "60", "--events", events, job, marker],
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        port = [status_port(events)]
        base = f"http://127.0.0.1:{port[0]}"
        # DNS rebinding: a page of another name resolved to 127.0.0.1 gets nothing.
        code, body = get(base + "/status", host=f"attacker.example:{port[0]}")
        assert code == 421, (code, body[:200])
        assert get(base + "/", host="attacker.example")[0] == 421
        assert get(base + "/status", host=f"localhost:{port[0]}")[0] == 200
        assert get(base + "/healthz", host=f"127.0.0.1:{port[0]}")[0] == 200
        # A viewer is watching (it asked for /status): the end will be served for the linger.
        assert get(base + "/status")[0] == 200
        open(marker, "w").close()
        final = {}

        def ended():
            code, body = get(base + "/status")
            if code == 200:
                final.update(json.loads(body))
            return final.get("job", {}).get("state") in ("succeeded", "failed")
        wait_until(ended, 60, "the final state on /status")
        job_state = final["job"]
        assert job_state["state"] == "failed" and job_state["exit_code"] == 137, job_state
        # The failure summary's root cause on one node: rank, how it ended, the message's line.
        assert job_state.get("root_cause", "").startswith(
            "rank 0 (local rank 0, attempt 0) was killed by SIGKILL: boom "), job_state
        assert any(e["event"] == "summary" for e in final["events"]), final["events"][-3:]
        assert proc.poll() is None, "ddprun exited instead of lingering"
        # The dashboard in a real browser shows the end (and stops polling).
        if cdp.find_chromium():
            browser = cdp.Browser(1200, 800)
            try:
                browser.navigate(base + "/")
                browser.wait_for("!!document.getElementById('ended')", 30, "the end banner")
                end = browser.evaluate("""(() => { const e = document.getElementById('ended');
                  return [e.dataset.state, e.dataset.exitCode, e.textContent]; })()""")
                assert end[:2] == ["failed", "137"], end
                assert "exit code 137: rank 0 (local rank 0, attempt 0) was killed by SIGKILL: boom" \
                    in end[2], end
                browser.screenshot(os.path.join(ARTEFACTS, "dashboard-ended.png"))
            finally:
                browser.close()
        # `top --once` of the ended job: its state, its exit code, no raw escape.
        top = subprocess.run([DDPRUN, "top", "--once", f"127.0.0.1:{port[0]}"],
                             capture_output=True, text=True, timeout=30,
                             env=clean_env(COLUMNS="200", LINES="50"))
        print(top.stdout, flush=True)
        assert top.returncode == 137, top
        assert "the job ended: failed, exit 137: rank 0 (local rank 0, attempt 0) was killed" \
            in top.stdout, top.stdout
        assert "scope ^[]0;pwned^G|^[]52;c;ZWNobyBoaQ==^G|^[[2J" in top.stdout, top.stdout
        assert raw_controls(top.stdout) == [], repr(top.stdout)
        # Ctrl-C cuts the linger: ddprun exits at once, with the job's code.
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        print(f"  exit {proc.returncode} {time.monotonic() - t0:.2f} s after SIGINT", flush=True)
        assert proc.returncode == 137, (proc.returncode, err[-2000:])
        assert time.monotonic() - t0 < 10
    finally:
        stop(proc)
    # ddprun's own stderr (its messages and the failure summary): the job's text made visible.
    assert "boom ^[]0;pwned^G" in err and "Traceback ^[]0;pwned^G" in err, err[-3000:]
    assert "scope ^[]0;pwned^G" in err, err[-3000:]
    assert raw_controls(err) == [], repr(err[-3000:])
    assert "serving the final state to the status endpoint's viewer for 60 s" in err, err[-3000:]
    # The worker's own output line is byte-identical (the output contract).
    assert f"[rank1]:raw {HOSTILE}\n" in out, repr(out)
    for fmt in ("md", "html"):
        rep = subprocess.run([DDPRUN, "report", "--format", fmt, events], capture_output=True,
                             text=True, timeout=30)
        assert rep.returncode == 0, rep
        assert "^[]0;pwned^G" in rep.stdout, rep.stdout[-2000:]
        assert raw_controls(rep.stdout) == [], fmt


def test_a_signal_to_ddprun_skips_the_linger(tmp):
    """A viewer asked for /status, then the operator (or Kubernetes) sends SIGTERM: ddprun stops
    the workers and exits 143 without serving the end for --status-linger 30."""
    job = os.path.join(tmp, "sleep.py")
    with open(job, "w") as f:
        f.write("import time\ntime.sleep(60)\n")
    events = os.path.join(tmp, "events.jsonl")
    proc = start(["--nproc-per-node", "1", "--status-port", "0", "--status-linger", "30",
                  "--events", events, job], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        port = [status_port(events)]
        assert get(f"http://127.0.0.1:{port[0]}/status")[0] == 200  # a viewer: linger armed
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=40)
        took = time.monotonic() - t0
        print(f"  exit {proc.returncode} {took:.2f} s after SIGTERM", flush=True)
        assert proc.returncode == 143, (proc.returncode, err[-2000:])
        assert took < 10, took  # far under the 30 s linger (about 0.1 s when idle)
        assert "serving the final state" not in err, err[-2000:]
    finally:
        stop(proc)


def test_no_viewer_no_linger(tmp):
    """--status-port without anyone asking for /status: the exit code comes at once."""
    job = os.path.join(tmp, "quick.py")
    with open(job, "w") as f:
        f.write("print('done')\n")
    r = run(["--nproc-per-node", "1", "--status-port", "0", "--status-linger", "60", job],
            timeout=60)
    print(f"  exit {r.rc} after {r.elapsed:.2f} s", flush=True)
    assert r.rc == 0, r
    assert r.elapsed < 30, r.elapsed  # far under the 60 s linger


def test_top_suspended_with_ctrl_z_gives_the_terminal_back(tmp):
    """Ctrl-Z: the main screen, a visible cursor and echo come back before top stops; `fg`
    brings the full screen back; the keys (? help, s sort) answer. Under a real tmux, 200x50."""
    if not shutil.which("tmux"):
        raise Skip("needs tmux")
    job = os.path.join(tmp, "sleep.py")
    with open(job, "w") as f:
        f.write("import time\ntime.sleep(120)\n")
    events = os.path.join(tmp, "events.jsonl")
    proc = start(["--nproc-per-node", "3", "--status-port", "0", "--status-linger", "0",
                  "--events", events, job])
    tmux = f"ddprun-safe-{os.getpid()}"
    try:
        port = [status_port(events)]
        subprocess.run(["tmux", "kill-session", "-t", tmux], capture_output=True)
        subprocess.run(["tmux", "new-session", "-d", "-s", tmux, "-x", "200", "-y", "50",
                        "env -i PATH=/usr/bin:/bin TERM=xterm HOME=/tmp bash --norc --noprofile"],
                       check=True)

        def keys(*k):
            subprocess.run(["tmux", "send-keys", "-t", tmux, *k], check=True)

        def pane():
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", tmux], capture_output=True,
                                  text=True).stdout

        def screen():  # alternate screen on?, cursor visible?
            out = subprocess.run(["tmux", "display", "-p", "-t", tmux,
                                  "#{alternate_on} #{cursor_flag}"], capture_output=True,
                                 text=True).stdout.split()
            return tuple(int(x) for x in out)

        keys(f"cd {tmp} && {DDPRUN} top {port[0]}; echo TOP-EXIT=$?", "Enter")
        wait_until(lambda: "ddprun top" in pane() and "RANK" in pane(), 30, f"top\n{pane()}")
        assert screen() == (1, 0), screen()
        keys("?")
        wait_until(lambda: "sort: worst first, rank, step, steps/s" in pane(), 10, pane())
        keys("s")
        wait_until(lambda: "s sort: rank" in pane(), 10, pane())
        keys("C-z")
        wait_until(lambda: screen() == (0, 1), 10, f"main screen after Ctrl-Z: {screen()}")
        wait_until(lambda: "Stopped" in pane(), 10, pane())
        keys("fg", "Enter")
        wait_until(lambda: screen() == (1, 0), 10, f"full screen after fg: {screen()}")
        wait_until(lambda: "RANK" in pane(), 10, pane())
        keys("q")
        wait_until(lambda: screen() == (0, 1), 10, f"top quits on q\n{pane()}")
        keys("echo FG-EXIT=$?", "Enter")  # the `; echo` ran at the stop (147)
        wait_until(lambda: "FG-EXIT=0" in pane(), 10, f"top's exit code\n{pane()}")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", tmux], capture_output=True)
        stop(proc)


if __name__ == "__main__":
    main(globals())
