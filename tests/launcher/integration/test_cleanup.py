# SPDX-License-Identifier: MIT
"""Issue 8, items 11, 12, 19 and 20: nothing escapes cleanup (a `setsid env -i` daemon after
`kill -9 ddprun`), nothing of a killed run stays in /dev/shm or $TMPDIR, stopped workers are
continued with SIGTERM, and a rank that never started is not called "terminated by ddprun"."""
import os
import signal
import subprocess
import time

from harness import (DDPRUN, assert_all_gone, clean_env, kill_ids, main, proc_stat, read_events,
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


if __name__ == "__main__":
    main(globals())
