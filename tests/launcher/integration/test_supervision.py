# SPDX-License-Identifier: MIT
"""First failure stops the rest; exit codes; grace then SIGKILL; signals to ddprun; restarts;
stacks saved for two watchdog timers that expire together."""
import os
import shutil
import signal
import time

from harness import (Skip, assert_all_gone, clean_env, helper, main, read_events, read_ids, run,
                     start, stop, wait_for_files)


def test_first_failure_stops_the_rest_with_its_exit_code(tmp):
    events = os.path.join(tmp, "ev.jsonl")
    r = run(["--nproc_per_node", "4", "--events", events, helper("crasher"), "2", "exit:3", "200"],
            timeout=30)
    assert r.rc == 3, r
    assert "Root cause (first observed failure):" in r.err, r
    assert "rank       : 2 (local_rank: 2)" in r.err and "exit code 3" in r.err, r
    assert "crasher: rank 2 failing now" in r.err, r  # last stderr lines of the root cause
    for rank in (0, 1, 3):
        assert f"rank {rank} (local_rank {rank}," in r.err and "[terminated by ddprun]" in r.err, r
    exits = [e for e in read_events(events) if e["event"] == "worker_exit"]
    assert len(exits) == 4
    peers = [e for e in exits if e["rank"] != 2]
    assert all(e["terminated_by_ddprun"] and e["signal"] == "SIGTERM" for e in peers), exits


def test_death_by_signal_maps_to_128_plus_n(tmp):
    r = run(["--nproc_per_node", "2", helper("crasher"), "0", "signal:11", "100"], timeout=30)
    assert r.rc == 128 + 11, r
    assert "signal SIGSEGV (11" in r.err, r


def test_error_file_contents_in_summary(tmp):
    r = run(["--nproc_per_node", "2", helper("crasher"), "1", "error:5", "100"], timeout=30)
    assert r.rc == 5, r
    assert "ValueError: crasher rank 1 broke" in r.err, r
    assert "Traceback (most recent call last):" in r.err, r


def test_error_file_with_a_surrogateescaped_name_is_read(tmp):
    # A real Python worker whose message names a non-UTF-8 file (os.fsdecode gives "\udcff"):
    # json.dump writes a lone surrogate escape, which a strict parser refuses whole.
    data = os.path.join(tmp, "data")
    os.mkdir(data)
    open(os.path.join(os.fsencode(data), b"shard_\xff.bin"), "w").close()
    script = os.path.join(tmp, "w.py")
    with open(script, "w") as f:
        f.write(f"""import json, os, sys, traceback
name = os.listdir({data!r})[0]
try:
    raise ValueError("cannot decode shard " + name)
except ValueError as e:
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump({{"message": {{"message": f"ValueError: {{e}}", "extraInfo": {{
            "py_callstack": traceback.format_exc(), "timestamp": "1700000000"}}}}}}, f)
    sys.exit(3)
""")
    r = run(["--nproc_per_node", "1", script], timeout=30)
    assert r.rc == 3, r
    assert "<none written>" not in r.err, r
    assert "ValueError: cannot decode shard shard_\ufffd.bin" in r.err, r
    assert "Traceback (most recent call last):" in r.err, r


def test_sigterm_ignoring_workers_die_after_the_grace(tmp):
    # Rank 0 fails; ranks 1-2 ignore SIGTERM and must be SIGKILLed after --shutdown-timeout 1.
    script = os.path.join(tmp, "w.sh")
    with open(script, "w") as f:
        f.write(f'#!/bin/sh\nif [ "$RANK" = 0 ]; then sleep 0.3; exit 4; fi\n'
                f'exec {helper("term_ignorer")} {tmp}\n')
    os.chmod(script, 0o755)
    r = run(["--nproc_per_node", "3", "--shutdown-timeout", "1", script], timeout=30)
    assert r.rc == 4, r
    assert "sending SIGKILL" in r.err, r
    assert r.err.count("signal SIGKILL (9)  [terminated by ddprun]") == 2, r
    ids = [read_ids(os.path.join(tmp, f"{rank}.pid")) for rank in (1, 2)]
    assert_all_gone([p for p, _ in ids], [g for _, g in ids])


def test_signals_to_ddprun_are_forwarded(tmp):
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)):
        d = os.path.join(tmp, str(int(sig)))
        os.mkdir(d)
        p = start(["--nproc_per_node", "2", helper("grandchild_spawner"), d, "wait"])
        try:
            files = [os.path.join(d, f"{r}.{k}") for r in (0, 1) for k in ("worker", "grandchild")]
            wait_for_files(files)
            ids = [read_ids(f) for f in files]
            os.kill(p.pid, sig)
            out, err = p.communicate(timeout=20)
            assert p.returncode == code, (sig, p.returncode, err)
            assert f"received {signal.Signals(sig).name}" in err, err
            assert_all_gone([i for i, _ in ids], [g for _, g in ids])
        finally:
            stop(p)


def test_second_ctrl_c_kills_at_once(tmp):
    # Workers ignore SIGTERM and SIGINT; the grace is long (60 s), so only the second Ctrl-C
    # can end this run within the test's timeout.
    p = start(["--nproc_per_node", "2", "--shutdown-timeout", "60", helper("term_ignorer"), tmp,
               "also-int"])
    try:
        wait_for_files([os.path.join(tmp, "0.pid"), os.path.join(tmp, "1.pid")])
        ids = [read_ids(os.path.join(tmp, f"{r}.pid")) for r in (0, 1)]
        os.kill(p.pid, signal.SIGINT)
        time.sleep(0.3)
        assert p.poll() is None  # still in its grace period
        os.kill(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=15)
        assert p.returncode == 130, err
        assert "received SIGINT again; killing the workers now" in err, err
        assert_all_gone([i for i, _ in ids], [g for _, g in ids])
    finally:
        stop(p)


def test_restarts_increment_the_restart_count(tmp):
    out = os.path.join(tmp, "logs")
    events = os.path.join(tmp, "ev.jsonl")
    # Rank 1 fails while TORCHELASTIC_RESTART_COUNT < 2: attempts 0 and 1 fail, attempt 2 succeeds.
    r = run(["--nproc_per_node", "2", "--max_restarts", "3", "--log_dir", out, "--tee", "1",
             "--events", events, helper("crasher"), "1", "exit:7", "100", "2"], timeout=30)
    assert r.rc == 0, r
    for attempt in (0, 1, 2):
        for rank in (0, 1):
            assert f"[rank{rank}]:crasher rank {rank} restart {attempt} pid" in r.out, r
    run_dirs = os.listdir(out)
    assert len(run_dirs) == 1
    attempts = sorted(os.listdir(os.path.join(out, run_dirs[0])))
    assert attempts == ["attempt_0", "attempt_1", "attempt_2"], attempts
    log = open(os.path.join(out, run_dirs[0], "attempt_2", "1", "stdout.log")).read()
    assert "crasher rank 1 restart 2" in log
    kinds = [e["event"] for e in read_events(events)]
    assert kinds.count("restart") == 2, kinds
    # Out of restarts: the last attempt's root cause decides, every attempt is listed.
    r = run(["--nproc_per_node", "2", "--max_restarts", "1", helper("crasher"), "0", "exit:9", "50"],
            timeout=30)
    assert r.rc == 9, r
    assert "attempt 0: rank 0 failed with exit code 9" in r.err, r
    assert "attempt 1: rank 0 failed with exit code 9" in r.err, r


# Issue 23, item 9: two ranks' watchdog timers expire together. Hostile: each ignores SIGTERM,
# and both ask for SIGKILL at the same instant, while py-spy reads them.
TWO_TIMERS = """
import json, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
rank, expires = int(os.environ["RANK"]), float(sys.argv[1])
with open(os.environ["TORCHELASTIC_TIMER_FILE"], "w") as fifo:
    fifo.write(json.dumps({"version": 1, "pid": os.getpid(), "scope_id": f"step_of_rank_{rank}",
                           "expiration_time": expires, "signal": 9}) + "\\n")
def stuck_in_rank_0():
    time.sleep(1000)
def stuck_in_rank_1():
    time.sleep(1000)
print("ready", flush=True)
stuck_in_rank_0() if rank == 0 else stuck_in_rank_1()
"""


def test_item23_9_two_timers_expiring_together_keep_every_stack(tmp):
    if not shutil.which("py-spy"):
        raise Skip("py-spy is not installed (scripts/setup.sh installs it)")
    script = os.path.join(tmp, "timers.py")
    with open(script, "w") as f:
        f.write(TWO_TIMERS)
    events = os.path.join(tmp, "ev.jsonl")
    logs = os.path.join(tmp, "logs")
    r = run(["--nproc_per_node", "2", "--file-timer", "--log_dir", logs, "--events", events, script,
             time.time() + 4], timeout=90)
    assert r.rc == 137, r
    ev = read_events(events)
    expired = [e for e in ev if e["event"] == "timer_expired"]
    assert sorted(e["rank"] for e in expired) == [0, 1], expired
    saved = [e for e in ev if e["event"] == "stacks_saved"]
    assert len(saved) == 1, saved  # one dump covers both; the second timer waited for it
    files = saved[0]["files"]
    assert sorted(f["rank"] for f in files) == [0, 1], files
    for f in files:
        text = open(f["path"]).read()
        assert f"stuck_in_rank_{f['rank']}" in text, text
    assert all(f["tool"] == "py-spy" and f.get("outcome") == "ok" and not f["timed_out"]
               for f in files), files
    # No signal before the stacks were saved: both timers act after the dump.
    order = [e["event"] for e in ev if e["event"] in ("stacks_saved", "worker_exit")]
    assert order[0] == "stacks_saved", order
    exits = [e for e in ev if e["event"] == "worker_exit"]
    assert all(e.get("signal") == "SIGKILL" for e in exits), exits


if __name__ == "__main__":
    main(globals())
