# SPDX-License-Identifier: MIT
"""torchrun's file-based watchdog under ddprun, against the real FileTimerClient of torch 2.x, and
the same script under torchrun 2.x itself. Usage: test_timer_torch.py [test names]"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import assert_all_gone, clean_env, kill_ids, main, read_events, run  # noqa: E402

JOB = os.path.join(HERE, "jobs", "timer_job.py")


def pids_in(pid_dir):
    out = {}
    for rank in (0, 1):
        path = os.path.join(pid_dir, f"rank{rank}.pid")
        if os.path.exists(path):
            with open(path) as f:
                out[rank] = int(f.read())
    return out


def test_expired_timer_kills_that_rank_with_stacks_first(tmp):
    events = os.path.join(tmp, "events.jsonl")
    r = run(["--nproc-per-node", "2", "--events", events, JOB], timeout=90,
            env=clean_env(TORCHELASTIC_ENABLE_FILE_TIMER="1", PID_DIR=tmp))
    # Rank 1's SIGKILL is the root cause: 128 + 9, as torchrun's own exit code (it SIGKILLs itself).
    assert r.rc == 137, r
    ev = read_events(events)
    expired = [e for e in ev if e["event"] == "timer_expired"]
    assert len(expired) == 1, ev
    e = expired[0]
    assert (e["rank"], e["scope"], e["signal"]) == (1, "slow_section", 9), e
    assert e["time"] >= e["deadline"], e
    order = [x["event"] for x in ev]
    assert order.index("stacks_saved") < order.index("worker_exit"), order
    exits = {x["rank"]: x for x in ev if x["event"] == "worker_exit"}
    assert exits[1]["signal"] == "SIGKILL" and not exits[1]["terminated_by_ddprun"], exits
    assert exits[0]["terminated_by_ddprun"], exits
    summary = [x for x in ev if x["event"] == "summary"][0]
    assert summary["attempts"][0]["root_cause_rank"] == 1, summary
    assert any("timer_expired: rank 1" in h for h in summary["health"]), summary
    assert "timer_expired: rank 1" in r.err and "scope 'slow_section'" in r.err, r
    stacks = [x for x in ev if x["event"] == "stacks_saved"][0]["files"]
    with open([f for f in stacks if f["rank"] == 1][0]["path"]) as f:
        assert "timer_job.py" in f.read()
    assert "rank 1 survived the timer" not in r.out, r
    pids = list(pids_in(tmp).values())
    assert len(pids) == 2
    assert_all_gone(pids, pids)


def test_file_timer_flag_and_timer_file_variable(tmp):
    fifo = os.path.join(tmp, "my_timer")
    r = run(["--file-timer", "--nproc-per-node", "2", JOB], timeout=90,
            env=clean_env(TORCHELASTIC_TIMER_FILE=fifo, PID_DIR=tmp))
    assert r.rc == 137, r
    assert f"timer file {fifo}" in r.out, r
    assert not os.path.exists(fifo)  # removed at the end


def test_torchrun_2x_kills_the_same_rank(tmp):
    torchrun = shutil.which("torchrun")
    if not torchrun:
        print("torchrun not installed; comparison skipped")
        return
    proc = subprocess.Popen([torchrun, "--nproc-per-node", "2", JOB], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=clean_env(TORCHELASTIC_ENABLE_FILE_TIMER="1", PID_DIR=tmp))
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
    pids = pids_in(tmp)
    try:
        # torchrun's FileTimerServer SIGKILLs rank 1, then SIGKILLs torchrun itself: 137.
        assert proc.returncode in (137, -9), (proc.returncode, out)
        assert "rank 1 survived the timer" not in out, out
        assert "rank 1 done" not in out, out
    finally:
        # torchrun leaves rank 0 running (it killed itself); clean up after it.
        kill_ids(list(pids.values()), [])


if __name__ == "__main__":
    try:
        import torch.distributed.elastic.timer  # noqa: F401
    except ImportError:
        print("SKIP: torch 2.x with torch.distributed.elastic.timer not available")
        sys.exit(77)
    # Kept run directories (the stacks of hung jobs) go to a scratch TMPDIR removed at the end.
    with tempfile.TemporaryDirectory(prefix="ddprun_health_") as scratch:
        os.environ["TMPDIR"] = scratch
        main(globals())
