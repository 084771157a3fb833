# SPDX-License-Identifier: MIT
"""Health inputs are untrusted (issue 23, items 6, 7, 8, 13): hostile HTTP clients on the status
port beside a /healthz probe, workers flooding the file-timer FIFO, workers whose error file is a
FIFO or a link to /dev/zero, and a status server at its descriptor limit. No torch needed.
Usage: test_hostile_inputs.py [test names]"""
import json
import os
import resource
import socket
import sys
import textwrap
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import Skip, ddprun_lines, main, read_events, run, start, stop, wait_until  # noqa: E402

MiB = 1 << 20


def get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def status_port(events):
    found = []

    def ready():
        if os.path.exists(events):
            found[:] = [e for e in read_events(events) if e["event"] == "status"]
        return bool(found)
    wait_until(ready, 30, "the status event")
    return found[0]["port"]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def probe(base):
    """/healthz answers 200; prints its latency (a figure, not an assertion)."""
    t0 = time.monotonic()
    code, body = get(base + "/healthz")
    print(f"  /healthz: {code} in {(time.monotonic() - t0) * 1000:.1f} ms", flush=True)
    assert code == 200 and body == "ok\n", (code, body)


def write_script(tmp, name, body):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(body))
    return path


def start_sleeper(tmp, extra=()):
    script = write_script(tmp, "sleeper.py", "import time\ntime.sleep(120)\n")
    events = os.path.join(tmp, "events.jsonl")
    proc = start(["--nproc-per-node", "1", "--status-port", "0", "--events", events, *extra,
                  script])
    return proc, f"http://127.0.0.1:{status_port(events)}"


def hostile_send(port, head, endless_piece, limit=64 * MiB):
    """Sends `head`, then `endless_piece` over and over until the server closes the connection
    (returns the bytes sent and what came back) or `limit` bytes are sent (returns None)."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        piece = endless_piece * max(1, 65536 // len(endless_piece))
        try:
            while sent < limit:
                s.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        else:
            return None, b""
        try:
            answer = s.recv(4096)
        except (ConnectionResetError, socket.timeout):
            answer = b""
        return sent, answer


def test_chunked_requests_are_bounded_headers_and_trailers_included(tmp):
    proc, base = start_sleeper(tmp)
    try:
        port = int(base.rsplit(":", 1)[1])
        probe(base)
        before = rss_bytes(proc.pid)
        head = b"GET /status HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
        cases = {
            "a chunk-size line that never ends": (head, b"1"),
            "a chunk extension that never ends": (head + b"5;ext=", b"a"),
            "a trailer line that never ends": (head + b"0\r\nX-Trailer: ", b"a"),
            "endless small trailer fields": (head + b"0\r\n", b"X-T: a\r\n"),
            "endless small chunks": (head, b"1\r\na\r\n"),
        }
        for what, (start_bytes, piece) in cases.items():
            sent, answer = hostile_send(port, start_bytes, piece)
            print(f"  {what}: closed after {sent} bytes, answer {answer[:40]!r}", flush=True)
            assert sent is not None, f"{what}: 64 MiB taken without closing the connection"
            # The kernel's socket buffers hold a few MiB; ddprun itself stops at 8 KiB.
            assert sent < 16 * MiB, (what, sent)
            probe(base)
        grown = rss_bytes(proc.pid) - before
        print(f"  ddprun RSS grew by {grown / MiB:.1f} MiB", flush=True)
        assert grown < 32 * MiB, f"ddprun grew by {grown} bytes"
        assert proc.poll() is None, "ddprun ended"
    finally:
        stop(proc)


def test_status_server_at_its_descriptor_limit_backs_off(tmp):
    proc, base = start_sleeper(tmp)
    held = []
    try:
        port = int(base.rsplit(":", 1)[1])
        probe(base)
        open_fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
        # A few descriptors to spare, then hostile clients that take them and send nothing.
        limit = open_fds + 4
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (limit, limit))
        for _ in range(12):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        time.sleep(0.5)  # ddprun accepts what it can and hits EMFILE
        cpu_before = cpu_seconds(proc.pid)
        time.sleep(3)
        spent = cpu_seconds(proc.pid) - cpu_before
        print(f"  ddprun used {spent:.3f} s of CPU in 3 s at its descriptor limit", flush=True)
        assert spent < 0.5, f"ddprun spins at its descriptor limit ({spent:.2f} s of CPU in 3 s)"
        for s in held:
            s.close()
        held.clear()
        # The idle timeout (5 s) frees the descriptors; the queued clients are served or closed.
        deadline = time.monotonic() + 30
        while True:
            try:
                probe(base)
                break
            except (AssertionError, OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert proc.poll() is None, "ddprun ended"
    finally:
        for s in held:
            s.close()
        stop(proc)


def test_soft_descriptor_limit_raised_for_ddprun_not_for_workers(tmp):
    out = os.path.join(tmp, "worker_limit")
    script = write_script(tmp, "limit.py", f"""
        import resource, time
        with open({out!r}, "w") as f:
            f.write(str(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
        time.sleep(120)
        """)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 512:
        raise Skip(f"the hard RLIMIT_NOFILE is {hard}")
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        proc = start(["--nproc-per-node", "1", script])
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)
    try:
        wait_until(lambda: os.path.exists(out) and open(out).read(), 30, "the worker's limit")
        with open(f"/proc/{proc.pid}/limits") as f:
            line = next(l for l in f if l.startswith("Max open files"))
        assert int(line.split()[3]) == hard, line
        assert open(out).read() == "256", open(out).read()
    finally:
        stop(proc)


FLOOD_JOB = """
    import json, os, sys, time
    rank = int(os.environ["RANK"])
    mode, marker = sys.argv[1], sys.argv[2]
    if rank == 1:  # fails once the flood is well under way
        deadline = time.monotonic() + 60
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        sys.exit(7)
    with open(os.environ["TORCHELASTIC_TIMER_FILE"], "wb") as pipe:
        if mode == "junk":
            block = b"y\\n" * 32768
            for i in range(1 << 40):
                pipe.write(block)
                if i == 64:
                    open(marker, "w").close()
        n = 0
        while True:  # valid requests, a new scope each time, far in the future
            lines = []
            for _ in range(200):
                n += 1
                lines.append(json.dumps({"version": 1, "pid": os.getpid(), "scope_id": f"s{n}",
                                         "expiration_time": time.time() + 3600,
                                         "signal": 9}))
            pipe.write(("\\n".join(lines) + "\\n").encode())
            if n == 70000:
                open(marker, "w").close()
    """


def run_flood(tmp, mode):
    script = write_script(tmp, "flood.py", FLOOD_JOB)
    events = os.path.join(tmp, f"events_{mode}.jsonl")
    t0 = time.monotonic()
    marker = os.path.join(tmp, f"flooding_{mode}")
    proc = start(["--nproc-per-node", "2", "--file-timer", "--events", events, script, mode,
                  marker])
    peak = 0
    try:
        while proc.poll() is None and time.monotonic() - t0 < 90:
            try:
                peak = max(peak, rss_bytes(proc.pid))
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.05)
        out, err = proc.communicate(timeout=30)
    finally:
        stop(proc)
    elapsed = time.monotonic() - t0
    print(f"  {mode}: ddprun exit {proc.returncode} after {elapsed:.1f} s, peak RSS "
          f"{peak / MiB:.1f} MiB, {len(err.splitlines())} stderr lines", flush=True)
    return proc.returncode, err, peak, elapsed


def test_a_worker_flooding_the_timer_pipe_with_junk(tmp):
    code, err, peak, elapsed = run_flood(tmp, "junk")
    warnings = [l for l in ddprun_lines(err) if "timer pipe" in l]
    assert code == 7, (code, err[-3000:])
    assert "rank       : 1" in err, err[-3000:]
    # One line for the first bad line, then at most one summary per 10 s.
    assert 1 <= len(warnings) <= 1 + elapsed / 10 + 1, warnings[:5]
    assert peak < 200 * MiB, peak
    assert elapsed < 60, elapsed


def test_a_worker_flooding_the_timer_pipe_with_valid_requests(tmp):
    code, err, peak, elapsed = run_flood(tmp, "valid")
    assert code == 7, (code, err[-3000:])
    assert "rank       : 1" in err, err[-3000:]
    warnings = [l for l in ddprun_lines(err) if "timer pipe" in l]
    # The table is bounded: past 65536 timers, requests for new ones are refused (and counted).
    assert any("more than 65536 timers" in l for l in warnings), warnings
    assert len(warnings) <= 1 + elapsed / 10 + 1, warnings[:5]
    assert peak < 200 * MiB, peak
    assert elapsed < 60, elapsed


def test_idle_connections_of_one_client_do_not_starve_healthz(tmp):
    """16 connections held open and silent (the server's whole limit): 20 of 20 /healthz probes
    are answered, each making room by closing the connection that waited longest."""
    proc, base = start_sleeper(tmp)
    port = int(base.rsplit(":", 1)[1])
    idle = []
    try:
        for _ in range(16):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(0.3)  # all accepted
        answered = 0
        for _ in range(20):
            try:
                code, body = get(base + "/healthz", timeout=3)
                answered += code == 200 and body == "ok\n"
            except OSError as e:
                print(f"  /healthz: {e}", flush=True)
            # The holder opens a new idle connection for every one it lost.
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        print(f"  /healthz answered {answered} of 20 beside 16 idle connections", flush=True)
        assert answered == 20, answered
    finally:
        for s in idle:
            s.close()
        stop(proc)


ERROR_FILE_JOB = """
    import os, sys, time
    path = os.environ["TORCHELASTIC_ERROR_FILE"]
    mode = sys.argv[1]
    if mode == "fifo":
        os.mkfifo(path)
    elif mode == "zero":
        os.symlink("/dev/zero", path)
    elif mode == "big":
        with open(path, "wb") as f:
            f.truncate(64 << 20)
    sys.exit(3)
    """


def test_error_files_that_are_fifos_devices_or_huge_are_skipped(tmp):
    script = write_script(tmp, "bad_error_file.py", ERROR_FILE_JOB)
    for mode in ("fifo", "zero", "big"):
        t0 = time.monotonic()
        r = run(["--nproc-per-node", "1", script, mode], timeout=60)
        print(f"  {mode}: exit {r.rc} in {time.monotonic() - t0:.1f} s", flush=True)
        assert r.rc == 3, r
        why = {"fifo": "not a regular file", "zero": "not a regular file",
               "big": "larger than 1 MiB"}[mode]
        assert "FAILED" in r.err and f"(not read: {why})" in r.err, r
        assert any("ignoring its error file" in l and why in l for l in ddprun_lines(r.err)), r


if __name__ == "__main__":
    main(globals())
