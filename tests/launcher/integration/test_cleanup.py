# SPDX-License-Identifier: MIT
"""Issue 8, items 11, 12, 19 and 20: nothing escapes cleanup (a `setsid env -i` daemon after
`kill -9 ddprun`), nothing of a killed run stays in /dev/shm or $TMPDIR, stopped workers are
continued with SIGTERM, and a rank that never started is not called "terminated by ddprun"."""
import os
import signal
import subprocess

from harness import (Skip, assert_all_gone, clean_env, kill_ids, main, proc_stat, read_events, run, start,
                     stop, wait_for_files, wait_until)

STOPPING_WORKER = """
import os, signal, sys, time
d, rank = sys.argv[1], os.environ["RANK"]
def on_term(*_):
    open(os.path.join(d, "term." + rank), "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
with open(os.path.join(d, "pid." + rank + ".tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(d, "pid." + rank + ".tmp"), os.path.join(d, "pid." + rank))
if rank == "0":
    os.kill(os.getpid(), signal.SIGSTOP)
while True:
    time.sleep(1)
"""


def test_item20_stopped_worker_is_continued_with_sigterm(tmp):
    # Rank 0 stops itself (SIGSTOP). SIGTERM to ddprun must reach its handler now, not a SIGKILL
    # after the 30 s grace.
    script = os.path.join(tmp, "w.py")
    with open(script, "w") as f:
        f.write(STOPPING_WORKER)
    events = os.path.join(tmp, "ev.jsonl")
    p = start(["--nproc_per_node", "2", "--shutdown-timeout", "30", "--events", events, script, tmp])
    try:
        wait_for_files([os.path.join(tmp, "pid.0"), os.path.join(tmp, "pid.1")])
        pid0 = int(open(os.path.join(tmp, "pid.0")).read())
        wait_until(lambda: (proc_stat(pid0) or ("?",))[0] == "T", 10, "rank 0 stopped")
        os.kill(p.pid, signal.SIGTERM)
        assert p.wait(timeout=60) == 143
        exits = {e["rank"]: e for e in read_events(events) if e["event"] == "worker_exit"}
        assert exits[0].get("exit_code") == 0, exits  # its SIGTERM handler ran: not SIGKILLed
        assert os.path.exists(os.path.join(tmp, "term.0"))
    finally:
        stop(p)


def test_item12_a_rank_that_never_started_is_not_terminated_by_ddprun(tmp):
    script = os.path.join(tmp, "bad.sh")
    with open(script, "w") as f:
        f.write("#!/nonexistent/interpreter\n")
    os.chmod(script, 0o755)
    r = run(["--nproc_per_node", "3", "--no_python", script], timeout=30)
    assert r.rc == 127, r
    assert "Other workers:" in r.err and "could not start" in r.err, r
    assert "[terminated by ddprun]" not in r.err, r


ESCAPING_WORKER = """#!/bin/sh
# A grandchild that leaves the session, the process group and the environment (no job token).
setsid env -i /bin/sh -c "echo \\$\\$ > $1/esc.$RANK.tmp; mv $1/esc.$RANK.tmp $1/esc.$RANK; exec sleep 1000" &
exec sleep 1000
"""


def escaping_worker(tmp):
    script = os.path.join(tmp, "w.sh")
    with open(script, "w") as f:
        f.write(ESCAPING_WORKER)
    os.chmod(script, 0o755)
    return script


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def test_item11_kill_9_leaves_no_setsid_env_i_grandchild(tmp):
    p = start(["--nproc_per_node", "2", "--no_python", escaping_worker(tmp), tmp], stderr=subprocess.PIPE)
    escapees = []
    try:
        wait_for_files([os.path.join(tmp, f"esc.{r}") for r in (0, 1)])
        escapees = [int(open(os.path.join(tmp, f"esc.{r}")).read()) for r in (0, 1)]
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        err = p.stderr.read()
        if "notice: no job cgroup" in err:
            raise Skip(f"no writable cgroup v2 here: {err.strip()}")
        assert_all_gone(escapees, [], timeout=10)
    finally:
        stop(p)
        kill_ids(escapees, [])


def test_item19_a_run_killed_with_its_guard_is_reclaimed_by_the_next(tmp):
    # The whole tree dies at once (as under an OOM kill or a cgroup kill from outside): ddprun and
    # its orphan guard are SIGKILLed. The next ddprun removes the dead run's scratch directory and
    # its job cgroup with whatever escaped into it.
    scratch = os.path.join(tmp, "scratch")
    os.mkdir(scratch)
    env = clean_env(TMPDIR=scratch)
    p = start(["--nproc_per_node", "1", "--no_python", escaping_worker(tmp), tmp], env=env,
              stderr=subprocess.PIPE)
    escapees = []
    try:
        wait_for_files([os.path.join(tmp, "esc.0")])
        escapees = [int(open(os.path.join(tmp, "esc.0")).read())]
        guards = [c for c in children_of(p.pid) if comm(c) == "ddprun"]
        assert len(guards) == 1, children_of(p.pid)
        os.kill(guards[0], signal.SIGKILL)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        has_cgroup = "notice: no job cgroup" not in p.stderr.read()
        assert os.listdir(scratch), "the killed run left nothing to reclaim"
        r = run(["--nproc_per_node", "1", "--no_python", "/bin/true"], env=env, timeout=30)
        assert r.rc == 0, r
        assert os.listdir(scratch) == [], os.listdir(scratch)
        if has_cgroup:
            assert_all_gone(escapees, [], timeout=10)
    finally:
        stop(p)
        kill_ids(escapees, [])


if __name__ == "__main__":
    main(globals())
