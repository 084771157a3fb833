# SPDX-License-Identifier: MIT
"""Issue 8, items 8-10: ddprun's loop never blocks on output it does not control. A console on a
socket that stops reading, a multi-node job whose store host has a stalled console, and log files
on a full file system: supervision, the hosted store and the other node carry on, nothing is lost,
and a log that cannot be written is reported (stderr line, event, summary, exit code 73)."""
import os
import re
import signal
import socket
import subprocess
import threading
import time

from harness import DDPRUN, Skip, clean_env, helper, main, read_events, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
FAST = "heartbeat_interval=0.3,heartbeat_timeout=2,join_timeout=30"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def read_all_into(fd, sink):
    """Reads `fd` to EOF on a thread; the bytes end up in the list `sink`."""
    def loop():
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        sink.append(b"".join(chunks))
    t = threading.Thread(target=loop)
    t.start()
    return t


def test_item8_a_socket_console_that_stops_reading_stalls_nothing(tmp):
    # ddprun's stdout is a socket nobody reads while 4 workers flood it. SIGTERM must still reach
    # the workers and be handled (every worker_exit in the events file) before a byte is read.
    events = os.path.join(tmp, "ev.jsonl")
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen([DDPRUN, "--nproc_per_node", "4", "--shutdown-timeout", "2",
                             "--events", events, helper("output_flooder"), "2000000", "40"],
                            stdout=theirs.fileno(), stderr=subprocess.PIPE, env=clean_env(),
                            start_new_session=True)
    theirs.close()
    try:
        wait_until(lambda: os.path.exists(events) and sum(
            e["event"] == "worker_start" for e in read_events(events)) == 4, 20, "4 workers started")
        time.sleep(0.5)  # the socket buffer, the sink's queue and the workers' pipes fill up
        os.kill(proc.pid, signal.SIGTERM)
        wait_until(lambda: sum(e["event"] == "worker_exit" for e in read_events(events)) == 4, 20,
                   "every worker exit handled while the socket console is stalled")
        exits = [e for e in read_events(events) if e["event"] == "worker_exit"]
        assert all(e.get("signal") == "SIGTERM" for e in exits), exits
        got = []
        reader = read_all_into(ours.fileno(), got)
        assert proc.wait(timeout=60) == 143
        reader.join(timeout=30)
        assert got and len(got[0]) > 0
    finally:
        kill_group(proc)
        ours.close()


def test_item8_the_last_flush_is_bounded_when_nobody_ever_reads(tmp):
    # ddprun's stdout is a pipe nobody will ever read; the worker writes ~2.4 MB (what the pipes and the queue hold) and exits 0. ddprun
    # must not wait forever for the reader: it gives up (one line on stderr) and exits 0.
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([DDPRUN, "--nproc_per_node", "1", helper("output_flooder"), "22000", "100"],
                            stdout=write_end, stderr=subprocess.PIPE, env=clean_env(),
                            start_new_session=True, text=True)
    os.close(write_end)
    try:
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        assert re.search(r"^ddprun: gave up on \d+ byte\(s\) of output", err, re.M), err
    finally:
        kill_group(proc)
        os.close(read_end)


NODE_WORKER = """#!/bin/sh
if [ "$GROUP_RANK" = 0 ]; then exec {flooder} 26000 100; fi
sleep 3
"""


def test_item9_store_host_with_a_stalled_console_keeps_serving_the_other_node(tmp):
    # Node 0 hosts the store; its stdout is a pipe nobody reads until node 1 is done. Its worker
    # writes ~2.8 MB and exits, so node 0 ends its attempt with output still queued. Node 1's worker
    # runs 3 s (longer than heartbeat_timeout): node 1 must still have its store and exit 0.
    script = os.path.join(tmp, "w.sh")
    with open(script, "w") as f:
        f.write(NODE_WORKER.format(flooder=helper("output_flooder")))
    os.chmod(script, 0o755)
    port = free_port()
    read_end, write_end = os.pipe()
    common = ["--nnodes", "2", "--nproc_per_node", "1", "--master_addr", "127.0.0.1",
              "--master_port", str(port), "--rdzv_conf", FAST, "--no_python", script]
    err0 = open(os.path.join(tmp, "node0.err"), "w")
    node0 = subprocess.Popen([DDPRUN, "--node_rank", "0"] + common, stdout=write_end, stderr=err0,
                             env=clean_env(), start_new_session=True)
    os.close(write_end)
    node1 = subprocess.Popen([DDPRUN, "--node_rank", "1"] + common, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=clean_env(), start_new_session=True,
                             text=True)
    reader = None
    try:
        out1, err1 = node1.communicate(timeout=60)
        assert node1.returncode == 0, f"node 1: rc={node1.returncode}\n{err1[-3000:]}"
        got = []
        reader = read_all_into(read_end, got)
        assert node0.wait(timeout=60) == 0
        reader.join(timeout=30)
        lines = got[0].decode().splitlines()
        assert sum(1 for l in lines if re.match(r"^\[rank0\]:r0 \d+ x{100}$", l)) == 26000
        assert lines[-1] == "[rank0]:r0 end", lines[-3:]
    finally:
        kill_group(node0)
        kill_group(node1)
        err0.close()
        os.close(read_end)


def test_item10_a_full_log_file_system_is_reported_and_nothing_is_lost(tmp):
    logs = os.path.join(tmp, "logs")
    os.mkdir(logs)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", logs],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        raise Skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    events = os.path.join(tmp, "ev.jsonl")
    try:
        # 20,000 lines of ~110 bytes (2.2 MB) per stream: far more than 256 KiB.
        proc = subprocess.run([DDPRUN, "--nproc_per_node", "1", "--log_dir", logs, "--redirects", "1",
                               "--events", events, helper("output_flooder"), "20000", "100"],
                              capture_output=True, env=clean_env(), timeout=60, text=True)
        out_log = next(os.path.join(d, f) for d, _, fs in os.walk(logs) for f in fs if f == "stdout.log")
        with open(out_log) as f:
            logged = f.read()
    finally:
        subprocess.run(["umount", "-l", logs])
    err = proc.stderr
    assert proc.returncode == 73, f"rc={proc.returncode}\n{err[-3000:]}"
    lines = [l for l in err.splitlines() if l.startswith("ddprun: cannot write")]
    assert len(lines) == 1 and "stdout.log" in lines[0] and "No space left on device" in lines[0], err
    errors = [e for e in read_events(events) if e["event"] == "log_error"]
    assert len(errors) == 1 and errors[0]["path"].endswith("stdout.log"), errors
    assert "stdout.log: No space left on device" in err.split("=" * 60)[1], err  # the summary
    # Nothing lost: each line is in the log file or (after the failure) on the console; only the
    # one line cut by the full disk is split between the two.
    seen = {int(m.group(1)) for m in re.finditer(r"^r0 (\d+) x{100}$", logged, re.M)}
    seen |= {int(m.group(1)) for m in re.finditer(r"^\[rank0\]:r0 (\d+) x{100}$", proc.stdout, re.M)}
    assert len(seen) >= 19999, len(seen)
    assert proc.stdout.endswith("[rank0]:r0 end\n"), proc.stdout[-200:]


def test_item10_an_events_file_that_cannot_be_written_is_reported(tmp):
    # /dev/full: every write fails with ENOSPC. Without a word, ddprun used to exit 0.
    r = subprocess.run([DDPRUN, "--nproc_per_node", "1", "--events", "/dev/full", "--no_python",
                        "/bin/true"], capture_output=True, env=clean_env(), timeout=30, text=True)
    assert r.returncode == 73, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.startswith("ddprun: cannot write")]
    assert lines == ["ddprun: cannot write '/dev/full': No space left on device; no more events are "
                     "written"], r.stderr
    assert "/dev/full (--events): No space left on device" in r.stderr, r.stderr


if __name__ == "__main__":
    main(globals())
