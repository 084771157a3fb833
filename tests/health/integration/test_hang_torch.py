# SPDX-License-Identifier: MIT
"""Hang verdicts with real PyTorch gloo jobs. Usage: test_hang_torch.py PYTHON [test names]
  PYTHON: /usr/bin/python3 (Debian's torch 1.13) or "default" (python3 on PATH, torch 2.x)."""
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import assert_all_gone, clean_env, main, read_events, run  # noqa: E402

JOBS = os.path.join(HERE, "jobs")
PYTHON = sys.argv.pop(1) if len(sys.argv) > 1 else "default"


def python_args():
    return [] if PYTHON == "default" else ["--python", PYTHON]


def have_torch():
    exe = "python3" if PYTHON == "default" else PYTHON
    return subprocess.run([exe, "-c", "import torch"], capture_output=True).returncode == 0


def worker_pids(pid_dir):
    pids = []
    for path in glob.glob(os.path.join(pid_dir, "rank*.pid")):
        with open(path) as f:
            pids.append(int(f.read()))
    return pids


def test_rank_sleeping_forever_is_a_hang_with_stacks_and_exit_75(tmp):
    events = os.path.join(tmp, "events.jsonl")
    logs = os.path.join(tmp, "logs")
    r = run(python_args() + ["--nproc-per-node", "2", "--hang-timeout", "5", "--events", events,
             "--log-dir", logs, os.path.join(JOBS, "gloo_steps.py"), "--steps", "50", "--log",
             "--hang-rank", "1", "--hang-step", "3", "--pid-dir", tmp], timeout=120)
    assert r.rc == 75, r
    ev = read_events(events)
    hang = [e for e in ev if e["event"] == "hang"]
    assert len(hang) == 1, ev
    # Judged on output lines (the job sends no heartbeat), about 5 s after the last step line.
    assert hang[0]["source"] == "output", hang
    assert hang[0]["idle_s"] >= 5.0, hang
    saved = [e for e in ev if e["event"] == "stacks_saved"]
    assert len(saved) == 1, ev
    files = {f["rank"]: f for f in saved[0]["files"]}
    assert sorted(files) == [0, 1], saved
    # Saved before any signal: the first worker_exit comes after stacks_saved.
    order = [e["event"] for e in ev]
    assert order.index("stacks_saved") < order.index("worker_exit"), order
    for rank, f in files.items():
        assert os.path.dirname(f["path"]).endswith(f"attempt_0/{rank}"), f
        assert f["tool"] == "py-spy", f
    with open(files[1]["path"]) as fh:
        stacks1 = fh.read()
    with open(files[0]["path"]) as fh:
        stacks0 = fh.read()
    assert "sleep_forever_inside_epoch" in stacks1, stacks1
    assert "train_one_epoch" in stacks1, stacks1
    assert "all_reduce" in stacks0, stacks0
    summary = [e for e in ev if e["event"] == "summary"][0]
    assert summary["exit_code"] == 75 and summary["hung"], summary
    assert "hung: no progress (output)" in r.err, r
    assert files[1]["path"] in r.err, r
    pids = worker_pids(tmp)
    assert len(pids) == 2
    assert_all_gone(pids, pids)


def test_logging_job_that_never_hangs_runs_to_the_end(tmp):
    # 20 steps of 0.5 s: longer than the timeout in total, never idle for it. (The timeout leaves
    # room for the seconds a loaded machine takes to tear torch down after the last line.)
    r = run(python_args() + ["--nproc-per-node", "2", "--hang-timeout", "8",
             os.path.join(JOBS, "gloo_steps.py"), "--steps", "20", "--step-seconds", "0.5", "--log"],
            timeout=120)
    assert r.rc == 0, r
    assert "hung" not in r.err, r
    assert r.out.count("done") == 2, r


def test_slow_steady_heartbeat_is_never_hung(tmp):
    # Heartbeats every 1.5 s, no output at all, hang timeout 3 s, for 9 s.
    events = os.path.join(tmp, "events.jsonl")
    r = run(["--nproc-per-node", "2", "--hang-timeout", "3", "--events", events,
             os.path.join(JOBS, "heartbeat_only.py"), "--steps", "6", "--every", "1.5"], timeout=120)
    assert r.rc == 0, r
    assert not [e for e in read_events(events) if e["event"] == "hang"]


def test_heartbeats_judge_a_job_whose_logging_thread_runs_on(tmp):
    # Once a job sends heartbeats, only they count: this one heartbeats 2 steps then only prints.
    script = os.path.join(tmp, "chatty.py")
    with open(script, "w") as f:
        f.write("import os, socket, time\n"
                "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                "for i in range(2):\n"
                "    s.sendto(b'step %d' % i, os.environ['DDPRUN_HEARTBEAT_SOCKET'])\n"
                "while True:\n"
                "    print('still alive', flush=True)\n"
                "    time.sleep(0.3)\n")
    events = os.path.join(tmp, "events.jsonl")
    r = run(["--hang-timeout", "2", "--events", events, script], timeout=60)
    assert r.rc == 75, r
    hang = [e for e in read_events(events) if e["event"] == "hang"]
    assert hang and hang[0]["source"] == "heartbeat", hang
    assert hang[0]["suspects"][0]["last_step"] == 1, hang


def test_hang_with_restarts_restarts_then_ends_75(tmp):
    # No torch here: a restarted gloo job depends on the store's restart handling, not on this.
    script = os.path.join(tmp, "stuck.py")
    with open(script, "w") as f:
        f.write("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    events = os.path.join(tmp, "events.jsonl")
    r = run(["--nproc-per-node", "2", "--hang-timeout", "2", "--max-restarts", "1",
             "--events", events, script], timeout=120)
    assert r.rc == 75, r
    ev = read_events(events)
    assert len([e for e in ev if e["event"] == "hang"]) == 2, ev
    assert len([e for e in ev if e["event"] == "restart"]) == 1, ev
    assert "restarting the workers (restart 1 of 1)" in r.err, r


def test_a_job_silent_from_the_start_is_judged_by_the_startup_timeout(tmp):
    script = os.path.join(tmp, "silent.py")
    with open(script, "w") as f:
        f.write("import time\ntime.sleep(600)\n")
    events = os.path.join(tmp, "events.jsonl")
    r = run(["--hang-timeout", "1", "--hang-startup-timeout", "3", "--events", events, script],
            timeout=60)
    assert r.rc == 75, r
    hang = [e for e in read_events(events) if e["event"] == "hang"]
    assert hang[0]["source"] == "start" and hang[0]["idle_s"] >= 3, hang
    assert "--hang-startup-timeout 3" in r.err, r


if __name__ == "__main__":
    if not have_torch():
        print(f"SKIP: no torch for {PYTHON}")
        sys.exit(77)
    # Kept run directories (the stacks of hung jobs) go to a scratch TMPDIR removed at the end.
    with tempfile.TemporaryDirectory(prefix="ddprun_health_") as scratch:
        os.environ["TMPDIR"] = scratch
        main(globals())
