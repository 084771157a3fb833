# SPDX-License-Identifier: MIT
"""Output: whole lines with [rankN]: prefixes, no tearing or loss under load, partial last lines,
log files, --redirects, --tee and --local_ranks_filter."""
import os
import re
import subprocess

from harness import DDPRUN, clean_env, helper, main, run

LINE = re.compile(r"^\[rank(\d+)\]:r(\d+) (\d+) x{40}$")
END = re.compile(r"^\[rank(\d+)\]:r(\d+) end$")


def test_eight_workers_times_1e5_lines_no_tearing(tmp):
    out_path = os.path.join(tmp, "out.txt")
    with open(out_path, "w") as out:
        proc = subprocess.run([DDPRUN, "--nproc_per_node", "8", helper("output_flooder"), "100000",
                               "40"], stdout=out, stderr=subprocess.PIPE, env=clean_env(),
                              timeout=120, text=True)
    assert proc.returncode == 0, proc.stderr
    next_seq = {}
    ends = set()
    with open(out_path) as f:
        for n, line in enumerate(f):
            line = line.rstrip("\n")
            m = LINE.match(line)
            if m:
                assert m.group(1) == m.group(2), f"line {n} mixes ranks: {line!r}"
                rank, seq = int(m.group(1)), int(m.group(3))
                assert next_seq.get(rank, 0) == seq, f"line {n}: rank {rank} expected {next_seq.get(rank, 0)}, got {seq}"
                next_seq[rank] = seq + 1
                continue
            m = END.match(line)
            assert m and m.group(1) == m.group(2), f"torn line {n}: {line[:200]!r}"
            ends.add(int(m.group(1)))
    assert next_seq == {r: 100000 for r in range(8)}, next_seq
    assert ends == set(range(8))  # the partial last line of every rank arrived whole


def test_stderr_is_prefixed_too(tmp):
    r = run(["--nproc_per_node", "2", helper("output_flooder"), "3", "5", "stderr"])
    assert r.rc == 0, r
    for rank in (0, 1):
        assert f"[rank{rank}]:r{rank} 2 xxxxx" in r.err and f"[rank{rank}]:r{rank} end" in r.err, r


def test_a_stalled_console_does_not_stall_supervision(tmp):
    # ddprun's stdout is a pipe nobody reads while 4 workers flood it. SIGTERM to ddprun must still
    # reach the workers (the events file shows every exit) before anyone reads a byte; once the
    # pipe is drained, ddprun exits 143 with the output it had accepted.
    import json
    import signal
    import threading
    import time
    from harness import read_events, wait_until
    events = os.path.join(tmp, "ev.jsonl")
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([DDPRUN, "--nproc_per_node", "4", "--events", events,
                             helper("output_flooder"), "2000000", "40"],
                            stdout=write_end, stderr=subprocess.PIPE, env=clean_env(),
                            start_new_session=True)
    os.close(write_end)
    try:
        def started():
            return os.path.exists(events) and sum(
                e["event"] == "worker_start" for e in read_events(events)) == 4
        wait_until(started, 20, "4 workers started")
        time.sleep(0.5)  # the pipe, the sink's queue and the workers' pipes fill up
        os.kill(proc.pid, signal.SIGTERM)
        wait_until(lambda: sum(e["event"] == "worker_exit" for e in read_events(events)) == 4, 20,
                   "every worker exit handled while the console is stalled")
        exits = [e for e in read_events(events) if e["event"] == "worker_exit"]
        assert all(e.get("signal") == "SIGTERM" for e in exits), exits
        drained = []
        reader = threading.Thread(target=lambda: drained.append(sum(
            len(c) for c in iter(lambda: os.read(read_end, 1 << 20), b""))))
        reader.start()
        assert proc.wait(timeout=30) == 143
        reader.join(timeout=30)
        assert drained and drained[0] > 0
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
        os.close(read_end)


def test_prefix_is_colored_on_a_terminal_only(tmp):
    import pty
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([DDPRUN, "--nproc_per_node", "2", helper("output_flooder"), "1", "1"],
                                stdout=slave, stderr=subprocess.PIPE, env=clean_env(),
                                start_new_session=True)
        os.close(slave)
        slave = -1
        data = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            data += chunk
        assert proc.wait(timeout=30) == 0
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    text = data.decode()
    assert "\x1b[" in text and "[rank1]:" in text and "r1 0 x" in text, repr(text)
    r = run(["--nproc_per_node", "2", helper("output_flooder"), "1", "1"])
    assert "\x1b[" not in r.out and "[rank1]:r1 0 x" in r.out, r


def test_log_dir_redirects_tee_and_filter(tmp):
    logs = os.path.join(tmp, "logs")
    # stdout of every rank to files only; stderr on the console; only local rank 1 on the console.
    r = run(["--nproc_per_node", "3", "--log_dir", logs, "--redirects", "1",
             "--local_ranks_filter", "1", helper("crasher"), "9", "exit:0", "0", "0"])
    assert r.rc == 0, r
    assert "[rank" not in r.out, r  # stdout is redirected for everyone
    (run_dir,) = os.listdir(logs)
    for rank in range(3):
        text = open(os.path.join(logs, run_dir, "attempt_0", str(rank), "stdout.log")).read()
        assert text.startswith(f"crasher rank {rank} restart 0"), text  # raw, no prefix
    # --tee 0:1,1:2: rank 0's stdout and rank 1's stderr go to files and the console.
    logs2 = os.path.join(tmp, "logs2")
    r = run(["--nproc_per_node", "2", "--log-dir", logs2, "--tee", "0:1,1:2",
             helper("output_flooder"), "2", "1"])
    assert r.rc == 0, r
    (run_dir,) = os.listdir(logs2)
    a0 = os.path.join(logs2, run_dir, "attempt_0")
    assert open(os.path.join(a0, "0", "stdout.log")).read() == "r0 0 x\nr0 1 x\nr0 end"
    assert not os.path.exists(os.path.join(a0, "1", "stdout.log"))
    assert "[rank0]:r0 0 x" in r.out and "[rank1]:r1 0 x" in r.out, r
    # --local_ranks_filter alone: the hidden ranks' output is kept in files.
    r = run(["--nproc_per_node", "2", "--local_ranks_filter", "0", helper("output_flooder"), "1", "1"],
            env=clean_env(TMPDIR=tmp))
    assert r.rc == 0, r
    assert "[rank0]:r0 0 x" in r.out and "rank1" not in r.out, r
    assert "worker logs:" in r.err, r


if __name__ == "__main__":
    main(globals())
