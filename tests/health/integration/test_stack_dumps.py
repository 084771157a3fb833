# SPDX-License-Identifier: MIT
"""Stack dumps at a hang, tried as a hostile worker and an unlucky operator would (breaker of
2026-12-07, findings F1, F2 and F3): a worker that makes its stacks.txt a FIFO must not freeze
ddprun; a ddprun SIGKILLed while its tools run must leave no tool, and no copy of itself,
holding its ports; a rank failing, or Ctrl-C, while the stacks are saved must neither signal a
rank under its tool nor lose the stacks or the verdict. No torch needed.
Usage: test_stack_dumps.py [test names]"""
import os
import socket
import stat
import sys
import textwrap
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import clean_env, main, read_events, start, stop, wait_until  # noqa: E402


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    os.chmod(path, mode)
    return path


def events_of(path, kind):
    return [e for e in read_events(path) if e["event"] == kind] if os.path.exists(path) else []


def processes_naming(marker):
    """Live processes whose command line holds `marker` (zombies do not count)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state not in ("Z", "X"):
            found.append((int(pid), cmdline))
    return found


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_worker_that_makes_its_stacks_file_a_fifo_does_not_freeze_ddprun(tmp):
    """F1: the header line's open() blocked the event loop until a reader came (no /healthz, no
    stop, forever). Now the file is skipped and the job ends 75 as hung."""
    worker = write(os.path.join(tmp, "fifo.py"), """\
        import os, time
        os.mkfifo(os.path.join(os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"]),
                               "stacks.txt"))
        print("made the FIFO", flush=True)
        time.sleep(600)
        """)
    events = os.path.join(tmp, "events.jsonl")
    proc = start(["--nproc-per-node", "1", "--hang-timeout", "2", "--hang-startup-timeout", "2",
                  "--log-dir", os.path.join(tmp, "logs"), "--events", events, worker])
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 75, (proc.returncode, out, err)
    saved = events_of(events, "stacks_saved")
    assert len(saved) == 1, read_events(events)
    outcomes = [f["outcome"] for f in saved[0]["files"]]
    assert outcomes == ["not started: not a regular file"], saved
    fifos = [os.path.join(d, n) for d, _, names in os.walk(os.path.join(tmp, "logs"))
             for n in names if n == "stacks.txt"]
    assert fifos and all(stat.S_ISFIFO(os.lstat(p).st_mode) for p in fifos), fifos


def test_ddprun_sigkilled_during_a_dump_leaves_no_tool_nor_keeper_holding_its_port(tmp):
    """F2: the keepers (copies of ddprun) and their tools outlived a SIGKILLed ddprun with its
    store's listening socket: the next job on that port ended 69. Now each keeper dies with
    ddprun, takes its tool along, and neither holds ddprun's descriptors."""
    marker = f"4242.{uuid.uuid4().int % 10**6}"
    tools = os.path.join(tmp, "tools")
    os.mkdir(tools)
    for name in ("py-spy", "eu-stack", "gdb"):  # every tool hangs, whichever ddprun picks
        write(os.path.join(tools, name), f"#!/bin/sh\nexec sleep {marker}\n", 0o755)
    worker = write(os.path.join(tmp, "hang.py"), "import time\nprint('up', flush=True)\n"
                   "time.sleep(600)\n")
    logs = os.path.join(tmp, f"logs-{marker}")
    events = os.path.join(tmp, "events.jsonl")
    port = free_port()
    env = clean_env(PATH=f"{tools}:{os.environ['PATH']}")
    proc = start(["--nproc-per-node", "2", "--master-port", port, "--hang-timeout", "2",
                  "--hang-startup-timeout", "2", "--log-dir", logs, "--events", events, worker],
                 env=env)
    try:
        wait_until(lambda: len(processes_naming(f"sleep {marker}")) == 2, 60, "both tools running")
        keepers = [parent_of(pid) for pid, _ in processes_naming(f"sleep {marker}")]
        assert all(k != proc.pid and any(k == p for p, _ in processes_naming(logs))
                   for k in keepers), (keepers, processes_naming(logs))  # copies of ddprun
        os.kill(proc.pid, 9)  # ddprun alone: its process group (the keepers') is left as is
        proc.wait(timeout=30)
        wait_until(lambda: not processes_naming(f"sleep {marker}") and
                   not any(pid in keepers for pid, _ in processes_naming(logs)),
                   10, "no tool and no keeper left after ddprun's SIGKILL")
        with socket.socket() as s:  # nothing holds the store's port
            s.bind(("0.0.0.0", port))
    finally:
        stop(proc)
        for pid, _ in processes_naming(marker):
            os.kill(pid, 9)


def slow_tools(tmp):
    """A PATH whose stack tools each take 3 s, marking their start and end in `tmp`."""
    tools = os.path.join(tmp, "slow-tools")
    os.mkdir(tools)
    for name in ("py-spy", "eu-stack", "gdb"):
        write(os.path.join(tools, name), f"""\
            #!/bin/sh
            touch {tmp}/tool-started
            sleep 3
            echo "stacks from the slow tool"
            touch {tmp}/tool-done
            """, 0o755)
    return clean_env(PATH=f"{tools}:{os.environ['PATH']}")


def run_hung_job(tmp, worker, during=None):
    """Two ranks of `worker` with --hang-timeout 2 under the slow tools; `during(proc)` runs
    while ddprun does. Returns (the ended process, its stderr, the events file)."""
    events = os.path.join(tmp, "events.jsonl")
    proc = start(["--nproc-per-node", "2", "--hang-timeout", "2", "--hang-startup-timeout", "2",
                  "--log-dir", os.path.join(tmp, "logs"), "--events", events, worker],
                 env=slow_tools(tmp))
    try:
        if during:
            during(proc)
        _, err = proc.communicate(timeout=90)
    finally:
        stop(proc)
    return proc, err, events


def test_a_worker_failing_during_the_dump_leaves_the_verdict_and_the_stacks(tmp):
    """F3: a rank that failed while the stacks were saved became the root cause (exit 3, not
    75), its peers were signalled under their tools and the cleanup's 5 s bound cancelled the
    dump with a false 'stuck in the kernel' warning (no stacks_saved)."""
    worker = write(os.path.join(tmp, "fails_during_dump.py"), f"""\
        import os, sys, time
        print("up", flush=True)
        while not os.path.exists("{tmp}/tool-started"):
            time.sleep(0.05)
        if os.environ["LOCAL_RANK"] == "1":
            sys.exit(3)  # during the dump, after the verdict
        time.sleep(600)
        """)
    proc, err, events = run_hung_job(tmp, worker)
    assert proc.returncode == 75, (proc.returncode, err)
    assert "stuck in the kernel" not in err, err
    saved = events_of(events, "stacks_saved")
    assert len(saved) == 1 and [f["outcome"] for f in saved[0]["files"]] == ["ok", "ok"], saved
    summary = events_of(events, "summary")[0]
    assert summary["end"] == "hung", summary
    # Rank 0 was stopped by ddprun once its stacks were saved, not under its tool.
    exits = {e["rank"]: e for e in events_of(events, "worker_exit")}
    assert exits[0]["terminated_by_ddprun"] and exits[0]["time"] >= saved[0]["time"], exits


def test_sigint_during_a_dump_waits_for_the_stacks(tmp):
    """F3: Ctrl-C while the stacks were saved signalled every rank at once, under its tool, and
    the dump was cancelled. Now the workers get the signal once the dump has ended (its own
    limit bounds that); the run ends 130 with the stacks saved."""
    worker = write(os.path.join(tmp, "interrupted.py"), f"""\
        import os, signal, sys, time
        def interrupted(sig, frame):
            done = os.path.exists("{tmp}/tool-done")
            with open("{tmp}/signalled-" + os.environ["LOCAL_RANK"], "w") as f:
                f.write(("after the tool" if done else "under the tool") + f" {{sig}}")
            sys.exit(1)
        signal.signal(signal.SIGINT, interrupted)
        signal.signal(signal.SIGTERM, interrupted)
        print("up", flush=True)
        time.sleep(600)
        """)
    def interrupt(proc):
        wait_until(lambda: os.path.exists(f"{tmp}/tool-started"), 60, "the dump")
        proc.send_signal(2)
    proc, err, events = run_hung_job(tmp, worker, during=interrupt)
    assert proc.returncode == 130, (proc.returncode, err)
    for rank in (0, 1):
        with open(f"{tmp}/signalled-{rank}") as f:
            assert f.read() == "after the tool 2", rank  # SIGINT, as the user sent
    saved = events_of(events, "stacks_saved")
    assert len(saved) == 1 and [f["outcome"] for f in saved[0]["files"]] == ["ok", "ok"], saved


if __name__ == "__main__":
    main(globals())
