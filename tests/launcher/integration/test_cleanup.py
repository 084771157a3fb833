# SPDX-License-Identifier: MIT
"""Issue 8, items 11, 12, 19 and 20: nothing escapes cleanup (a `setsid env -i` daemon after
`kill -9 ddprun`), nothing of a killed run stays in /dev/shm or $TMPDIR, stopped workers are
continued with SIGTERM, and a rank that never started is not called "terminated by ddprun".
Issue 23, items 1, 3, 4 and 5: restarts after `cgroup.kill`, cgroups the workers make, a pid
hopper, and the directory a hang verdict announced."""
import os
import signal
import subprocess
import time

from harness import (Skip, assert_all_gone, clean_env, helper, kill_ids, main, proc_stat, read_events,
                     run, start, stop, wait_for_files, wait_until)

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


def cgroup2_mount():
    """Where cgroup v2 is mounted, probed as ddprun does (/proc/self/mountinfo); None if nowhere."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            if tail.split()[:1] == ["cgroup2"]:
                return head.split()[4]
    return None


def has_job_cgroup(err):
    return "notice: no job cgroup" not in err


LEAVING_A_CHILD = """#!/bin/sh
# Every attempt: say it ran and wait (a while at most) for the other rank to say so too, then
# leave a child behind and fail. Rank 1 with "escalate" ignores SIGTERM (and so does its child),
# so that only the SIGKILL after the grace ends it.
a=$TORCHELASTIC_RESTART_COUNT
touch "$1/ran.$a.$RANK"
n=0
while [ ! -e "$1/ran.$a.0" ] || [ ! -e "$1/ran.$a.1" ]; do
  n=$((n + 1)); [ $n -gt 300 ] && break; sleep 0.01
done
if [ "$2" = escalate ] && [ "$RANK" = 1 ]; then
  trap '' TERM
  sleep 1000 &
  while :; do sleep 1; done
fi
sleep 1000 &
exit 1
"""


def restarts_after_cgroup_kill(tmp, escalate):
    script = os.path.join(tmp, "w.sh")
    with open(script, "w") as f:
        f.write(LEAVING_A_CHILD)
    os.chmod(script, 0o755)
    restarts = 100
    args = ["--nproc_per_node", "2", "--max-restarts", restarts, "--shutdown-timeout", "0.05",
            "--no_python", script, tmp, "escalate" if escalate else "plain"]
    r = run(args, timeout=150)
    if not has_job_cgroup(r.err):
        raise Skip("no writable cgroup v2 here")
    assert r.rc == 1, r
    # Each attempt ended with cgroup.kill (leftovers, or the SIGKILL escalation); a worker killed
    # at birth never runs its first line.
    missing = [f"ran.{a}.{rank}" for a in range(restarts + 1) for rank in (0, 1)
               if not os.path.exists(os.path.join(tmp, f"ran.{a}.{rank}"))]
    assert not missing, f"{len(missing)} worker(s) never ran: {missing[:6]}\n{r}"
    assert "restart 100 of 100" in r.err, r
    assert "sending SIGKILL" in r.err if escalate else "process(es) the workers left running" in r.err, r


def test_item23_1_restarts_survive_cgroup_kill_of_leftovers(tmp):
    restarts_after_cgroup_kill(tmp, escalate=False)


def test_item23_1_restarts_survive_cgroup_kill_after_sigkill_escalation(tmp):
    restarts_after_cgroup_kill(tmp, escalate=True)


NESTING_WORKER = """
import os, subprocess, sys
d, mount = sys.argv[1], sys.argv[2]
own = [l[3:].strip() for l in open("/proc/self/cgroup") if l.startswith("0::")][0]
nested = mount + own + "/nested/deeper"
os.makedirs(nested)
child = subprocess.Popen(["sleep", "1000"])
with open(nested + "/cgroup.procs", "w") as f:
    f.write(str(child.pid))
with open(os.path.join(d, "cgroup"), "w") as f:
    f.write(own)
"""


def test_item23_3_a_cgroup_made_by_a_worker_does_not_keep_the_job_cgroup(tmp):
    mount = cgroup2_mount()
    if mount is None:
        raise Skip("cgroup v2 is not mounted")
    script = os.path.join(tmp, "nest.py")
    with open(script, "w") as f:
        f.write(NESTING_WORKER)
    r = run(["--nproc_per_node", "1", script, tmp, mount], timeout=60)
    if not has_job_cgroup(r.err):
        raise Skip("no writable cgroup v2 here")
    assert r.rc == 0, r
    own = open(os.path.join(tmp, "cgroup")).read()
    parts = own.split("/")
    run_cgroup = "/".join(parts[:next(i for i, p in enumerate(parts) if p.startswith("ddprun-")) + 1])
    assert not os.path.exists(mount + run_cgroup), os.listdir(mount + run_cgroup)


HOPPING_WORKER = """#!/bin/sh
# Starts a pid hopper (out of the cgroup, setsid, empty environment, fork + exit in a loop) and
# returns once it hops.
"$2" "$1/hopper"
while [ ! -s "$1/hopper" ]; do sleep 0.01; done
"""


def hopper_alive(state, seconds=1.0):
    """The hopper rewrites its state file every 64 hops: alive when the file changes."""
    before = open(state).read()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if open(state).read() != before:
            return True
    return False


def test_item23_4_a_pid_hopper_that_left_the_cgroup_does_not_outlive_ddprun(tmp):
    script = os.path.join(tmp, "hop.sh")
    with open(script, "w") as f:
        f.write(HOPPING_WORKER)
    os.chmod(script, 0o755)
    state = os.path.join(tmp, "hopper")
    try:
        for attempt in range(3):  # each run must catch it
            os.path.exists(state) and os.remove(state)
            r = run(["--nproc_per_node", "1", "--no_python", script, tmp, helper("pid_hopper")],
                    timeout=60)
            assert r.rc == 0, r
            left_cgroup = open(state).read().split()[1] == "1"
            if has_job_cgroup(r.err) and not left_cgroup:
                raise Skip("the hopper could not leave the job cgroup here")
            assert not hopper_alive(state), f"run {attempt}: the hopper outlived ddprun\n{r}"
            assert "killing" in r.err, r
    finally:
        open(state + ".stop", "w").close()


def test_item23_5_the_directory_a_hang_verdict_announced_survives_kill_9(tmp):
    # A silent worker that ignores SIGTERM: the verdict saves its stacks, announces the directory,
    # then ddprun waits out the grace; it is SIGKILLed meanwhile. The guard must keep what was
    # announced.
    script = os.path.join(tmp, "hang.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\ntrap '' TERM\necho $$ > \"$1/pid\"\nexec sleep 1000\n")
    os.chmod(script, 0o755)
    p = start(["--nproc_per_node", "1", "--hang-timeout", "1", "--hang-startup-timeout", "1",
               "--shutdown-timeout", "60", "--no_python", script, tmp], env=clean_env(TMPDIR=tmp))
    try:
        line = ""
        deadline = time.monotonic() + 60
        while "worker logs and stacks:" not in line and time.monotonic() < deadline:
            line = p.stderr.readline()
            assert line, "ddprun ended before the verdict"
        announced = line.split("worker logs and stacks:", 1)[1].strip()
        worker = int(open(os.path.join(tmp, "pid")).read())
        guards = [c for c in children_of(p.pid) if comm(c) == "ddprun"]
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        # The guard has done its work once it is gone (it kills the worker first).
        wait_until(lambda: all(proc_stat(g) is None for g in guards), 20, "the orphan guard to end")
        assert proc_stat(worker) is None
        assert os.path.isfile(os.path.join(announced, "attempt_0", "0", "stacks.txt")), announced
    finally:
        stop(p)


if __name__ == "__main__":
    main(globals())
