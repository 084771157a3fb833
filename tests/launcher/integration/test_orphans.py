# SPDX-License-Identifier: MIT
"""No process survives `kill -9 ddprun`, nor the end of a run: checked by pid and process group,
with a grandchild that daemonises (double fork, with and without setsid). And nothing else is hit
(issue 23, item 2): an unrelated process that got a dead worker's pid number (and so leads a group
of that number) survives ddprun's cleanup and its orphan guard's, and receives no signal at all
(issue 35, item 13: not even the SIGTERM and SIGCONT that stop the workers), also when the dead
worker belongs to an earlier attempt."""
import json
import os
import signal
import subprocess
import sys

from harness import (DDPRUN, Skip, assert_all_gone, clean_env, helper, kill_ids, main, read_ids, run,
                     start, stop, wait_for_files)


def spawned_ids(d, ranks):
    files = [os.path.join(d, f"{r}.{k}") for r in ranks for k in ("worker", "grandchild")]
    wait_for_files(files)
    ids = [read_ids(f) for f in files]
    return [p for p, _ in ids], sorted({g for _, g in ids})


def kill9_case(tmp, mode):
    d = os.path.join(tmp, mode or "plain")
    os.mkdir(d)
    args = ["--nproc_per_node", "3", helper("grandchild_spawner"), d, "wait"] + ([mode] if mode else [])
    p = start(args)
    pids, pgids = [], []
    try:
        pids, pgids = spawned_ids(d, range(3))
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        assert_all_gone(pids, pgids, timeout=5)
    finally:
        stop(p)
        kill_ids(pids, pgids)


def test_kill_9_leaves_nothing(tmp):
    kill9_case(tmp, None)


def test_kill_9_leaves_nothing_even_setsid_daemons(tmp):
    kill9_case(tmp, "setsid")


def test_end_of_run_leaves_nothing(tmp):
    for mode in (None, "setsid"):
        d = os.path.join(tmp, f"end_{mode}")
        os.mkdir(d)
        r = run(["--nproc_per_node", "2", helper("grandchild_spawner"), d, "exit"] +
                ([mode] if mode else []), timeout=30)
        pids, pgids = spawned_ids(d, range(2))
        try:
            assert r.rc == 0, r
            # ddprun has already exited: nothing may be running now.
            assert_all_gone(pids, pgids, timeout=0.5)
        finally:
            kill_ids(pids, pgids)


# Runs as pid 1 of a private pid namespace, where pid numbers can be forced (ns_last_pid). Rank 0
# exits at once and is reaped; an unrelated process then gets its pid number and leads a process
# group of that number (setsid), as any process might once the numbers wrap. Rank 1 then fails
# leaving a child (ddprun's stop and cleanup reach the dead rank's group), or ddprun is SIGKILLed
# (its orphan guard cleans up); in mode kill9_after_restart rank 1's failure starts attempt 1, and
# ddprun is SIGKILLed during it (rank 0's group is one of an earlier attempt). The bystander logs
# every signal it can catch. Prints what became of it.
PID_REUSE_WORKER = """#!/bin/sh
if [ "$TORCHELASTIC_RESTART_COUNT" = 1 ]; then
  echo $$ > "$1/a1.$RANK.tmp"; mv "$1/a1.$RANK.tmp" "$1/a1.$RANK"; exec sleep 1000
fi
if [ "$RANK" = 0 ]; then echo $$ > "$1/pid.0.tmp"; mv "$1/pid.0.tmp" "$1/pid.0"; exit 0; fi
read go < "$1/go"
sleep 1000 &
echo $! > "$1/leftover"
exit 1
"""

BYSTANDER = r"""
import signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
for s in (signal.SIGTERM, signal.SIGCONT, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
          signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, lambda n, f: log.write(signal.Signals(n).name + "\n"))
open(sys.argv[1] + ".ready", "w").close()
while True:
    time.sleep(1)
"""

PID_REUSE = r"""
import json, os, subprocess, sys, time
ddprun, d, mode, worker, bystander_script = sys.argv[1:6]
os.mkfifo(os.path.join(d, "go"))
restarts = ["--max_restarts", "1"] if mode == "kill9_after_restart" else []
p = subprocess.Popen([ddprun, "--nproc_per_node", "2", *restarts, "--no_python", worker, d],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

def wait_for(pred, what, seconds=30):
    end = time.monotonic() + seconds
    while not pred():
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)

def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False

pid_file = os.path.join(d, "pid.0")
wait_for(lambda: os.path.exists(pid_file), "rank 0")
rank0 = int(open(pid_file).read())
wait_for(lambda: not os.path.exists(f"/proc/{rank0}"), "rank 0 to be reaped")
for _ in range(20):
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(rank0 - 1))
    bystander = subprocess.Popen([sys.executable, bystander_script, os.path.join(d, "signals")],
                                 start_new_session=True)
    if bystander.pid == rank0:
        wait_for(lambda: os.path.exists(os.path.join(d, "signals.ready")), "the bystander")
        break
    bystander.kill()
    bystander.wait()
else:
    print(json.dumps({"skip": "could not place a process at a reused pid"}))
    sys.exit(0)
with open(os.path.join(d, "go"), "w") as f:
    f.write("go\n")
rc = None
if mode.startswith("kill9"):
    wait_for(lambda: os.path.exists(os.path.join(d, "leftover")), "rank 1's leftover")
    if mode == "kill9_after_restart":
        wait_for(lambda: all(os.path.exists(os.path.join(d, f"a1.{r}")) for r in (0, 1)),
                 "attempt 1")
    children = open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()
    guards = [int(c) for c in children if open(f"/proc/{c}/comm").read().strip() == "ddprun"]
    p.kill()
    p.wait()
    wait_for(lambda: not any(alive(g) for g in guards), "the orphan guard to end")
else:
    rc = p.wait(timeout=60)
time.sleep(0.2)
leftover = int(open(os.path.join(d, "leftover")).read())
signals = open(os.path.join(d, "signals")).read().split() if os.path.exists(os.path.join(d, "signals")) else []
print(json.dumps({"rc": rc, "rank0": rank0, "bystander_alive": bystander.poll() is None,
                  "bystander_signals": signals,
                  "bystander_pgid": os.getpgid(bystander.pid) if alive(bystander.pid) else None,
                  "leftover_alive": alive(leftover), "stderr": p.stderr.read()}))
"""


def pid_reuse_case(tmp, mode):
    probe = subprocess.run(["unshare", "-pf", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        raise Skip(f"cannot make a pid namespace here: {probe.stderr.decode().strip()}")
    d = os.path.join(tmp, mode)
    os.mkdir(d)
    script, worker = os.path.join(d, "inner.py"), os.path.join(d, "w.sh")
    bystander = os.path.join(d, "bystander.py")
    with open(script, "w") as f:
        f.write(PID_REUSE)
    with open(bystander, "w") as f:
        f.write(BYSTANDER)
    with open(worker, "w") as f:
        f.write(PID_REUSE_WORKER)
    os.chmod(worker, 0o755)
    r = subprocess.run(["unshare", "-pf", "--mount-proc", sys.executable, script, DDPRUN, d, mode,
                        worker, bystander], capture_output=True, text=True, timeout=120, env=clean_env())
    assert r.returncode == 0, r
    result = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in result:
        raise Skip(result["skip"])
    assert result["bystander_alive"], result
    assert result["bystander_signals"] == [], result  # not even a SIGTERM or SIGCONT it survived
    assert result["bystander_pgid"] == result["rank0"], result  # it did lead the reused group
    assert not result["leftover_alive"], result  # and the cleanup still did its work
    if mode == "cleanup":
        assert result["rc"] == 1, result
    return result


def test_item23_2_cleanup_spares_a_process_that_reused_a_dead_workers_pid(tmp):
    pid_reuse_case(tmp, "cleanup")


def test_item23_2_the_orphan_guard_spares_a_process_that_reused_a_dead_workers_pid(tmp):
    pid_reuse_case(tmp, "kill9")


def test_item35_13_the_orphan_guard_spares_a_reused_group_of_an_earlier_attempt(tmp):
    pid_reuse_case(tmp, "kill9_after_restart")


if __name__ == "__main__":
    main(globals())
