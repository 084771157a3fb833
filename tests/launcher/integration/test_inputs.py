# SPDX-License-Identifier: MIT
"""Untrusted inputs and compatibility polish (issue 23, items 10-12, 17-19): the rendezvous token
out of /proc, JSON that survives any bytes, bounded durations from the environment, the Slurm
report on an inconsistent environment, prefixes torch 2.x already wrote, the error time, the man
page's exit codes and lines over 1 MiB. Real ddprun processes, no torch.
Usage: test_inputs.py [test names]"""
import datetime
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time

from harness import DDPRUN, Skip, clean_env, ddprun_lines, main, run, start, stop, wait_until

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BAD = b"h\xff\xfex"  # not UTF-8


def write_script(tmp, name, body):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(body))
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_bytes(args, env=None, timeout=60, prefix=()):
    """ddprun with byte arguments; (rc, stdout bytes, stderr bytes)."""
    p = subprocess.run([*prefix, os.fsencode(DDPRUN), *args], env=env or clean_env(),
                       capture_output=True, timeout=timeout, start_new_session=True)
    return p.returncode, p.stdout, p.stderr


def in_uts_namespace(hostname):
    """A command prefix that runs the rest under a private host name (root only), or Skip."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "--uts", "true"], capture_output=True) \
        if unshare else None
    if not probe or probe.returncode != 0:
        raise Skip("cannot create a UTS namespace here")
    setter = ("import os, socket, sys; socket.sethostname(bytes.fromhex(sys.argv[1])); "
              "os.execv(sys.argv[2], sys.argv[2:])")
    return [unshare, "--uts", sys.executable, "-c", setter, hostname.hex()]


# --- item 10: the token ------------------------------------------------------------------------

TOKEN_PEEK = """
    import os, sys, time
    parent = os.getppid()
    with open(sys.argv[1] + f".{os.environ['RANK']}", "wb") as out:
        for what in ("environ", "cmdline"):
            with open(f"/proc/{parent}/{what}", "rb") as f:
                out.write(f.read() + b"\\n")
        out.write(repr(sorted(k for k in os.environ if "TOKEN" in k)).encode())
    """


def test_token_is_not_in_proc_environ_or_cmdline(tmp):
    peek = write_script(tmp, "peek.py", TOKEN_PEEK)
    seen = os.path.join(tmp, "seen")
    port = free_port()
    env = clean_env(DDPRUN_RDZV_TOKEN="env-secret-41",
                    PET_RDZV_CONF="join_timeout=30,token=pet-secret-42")
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master_addr", "127.0.0.1",
              "--master_port", port]
    # node 0: the token in --rdzv_conf (spelled as an abbreviation too); node 1: token_file.
    token_file = os.path.join(tmp, "token")
    with open(token_file, "w") as f:
        f.write("argv-secret-43\n")
    node0 = start([*common, "--node_rank", "0", "--rdzv_c", "join_timeout=30,token=argv-secret-43",
                   peek, seen], env=env)
    node1 = start([*common, "--node_rank", "1", f"--rdzv_conf=join_timeout=30,token_file={token_file}", peek,
                   seen], env=clean_env())
    try:
        wait_until(lambda: os.path.exists(seen + ".0") and os.path.exists(seen + ".1"), 60,
                   "both workers")
        for node in (node0, node1):
            for what in ("environ", "cmdline"):
                with open(f"/proc/{node.pid}/{what}", "rb") as f:
                    text = f.read()
                assert b"secret" not in text, (what, text)
        for r in ("0", "1"):
            with open(seen + "." + r, "rb") as f:
                text = f.read()
            assert b"secret" not in text, text
        out0, err0 = node0.communicate(timeout=60)
        out1, err1 = node1.communicate(timeout=60)
        assert node0.returncode == 0 and node1.returncode == 0, (err0, err1)
    finally:
        stop(node0)
        stop(node1)


def test_token_file_errors(tmp):
    base = ["--nnodes", "2", "--master_port", free_port(), "/bin/true"]
    r = run(["--rdzv_conf", f"token_file={tmp}/missing", *base], timeout=20)
    assert r.rc == 2 and "token_file: cannot read" in r.err, r
    empty = os.path.join(tmp, "empty")
    open(empty, "w").close()
    r = run(["--rdzv_conf", f"token_file={empty}", *base], timeout=20)
    assert r.rc == 2 and "is empty" in r.err, r
    r = run(["--rdzv_conf", f"token=a,token_file={empty}", *base], timeout=20)
    assert r.rc == 2 and "both given" in r.err, r


# --- item 11: JSON survives any bytes ----------------------------------------------------------

def test_dry_run_events_with_non_utf8_arguments_and_run_id(tmp):
    rc, out, err = run_bytes([b"--dry-run", b"--events", b"-", b"--rdzv-id", BAD, b"/bin/echo",
                              BAD])
    assert rc == 0, (rc, err)
    lines = [json.loads(l) for l in out.decode().splitlines()]
    assert lines and lines[0]["argv"][-1] == "h\ufffd\ufffdx", lines
    assert lines[0]["env"]["TORCHELASTIC_RUN_ID"] == "h\ufffd\ufffdx", lines[0]["env"]


def test_status_on_a_host_whose_name_is_not_utf8(tmp):
    prefix = in_uts_namespace(BAD)
    script = write_script(tmp, "sleep.py", "import time\ntime.sleep(120)\n")
    events = os.path.join(tmp, "events.jsonl")
    proc = subprocess.Popen([*prefix, DDPRUN, "--status-port", "0", "--events", events, script],
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        port = []

        def ready():
            if os.path.exists(events):
                with open(events, "rb") as f:
                    port[:] = [json.loads(l)["port"] for l in f
                               if b'"event":"status"' in l.replace(b" ", b"")]
            return bool(port)
        wait_until(ready, 30, "the status event")
        with socket.create_connection(("127.0.0.1", port[0]), timeout=10) as s:
            s.sendall(b"GET /status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), answer[:300]
        assert json.loads(body)["host"] == "h\ufffd\ufffdx", body
        assert proc.poll() is None, proc.communicate()
    finally:
        stop(proc)


def test_multinode_join_from_a_host_whose_name_is_not_utf8(tmp):
    prefix = in_uts_namespace(BAD)
    port = free_port()
    common = [b"--nnodes", b"2", b"--nproc-per-node", b"1", b"--master_addr", b"127.0.0.1",
              b"--master_port", str(port).encode(), b"--rdzv_conf", b"join_timeout=30",
              b"/bin/true"]
    node0 = subprocess.Popen([DDPRUN, *common[:-1], b"--node_rank", b"0", b"/bin/true"],
                             env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    try:
        rc1, out1, err1 = run_bytes([*common[:-1], b"--node_rank", b"1", b"/bin/true"],
                                    prefix=prefix)
        out0, err0 = node0.communicate(timeout=60)
        assert rc1 == 0 and node0.returncode == 0, (rc1, err1, node0.returncode, err0)
    finally:
        stop(node0)


# --- item 12: durations from the environment ---------------------------------------------------

def test_durations_from_the_environment_are_bounded(tmp):
    cases = [
        (dict(DDPRUN_STRAGGLER_WINDOW="1e30"), [], "DDPRUN_STRAGGLER_WINDOW: '1e30'"),
        (dict(TORCH_ELASTIC_SHUTDOWN_TIMEOUT="1e30"), [], "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: '1e30'"),
        ({}, ["--rdzv_conf", "join_timeout=1e30", "--nnodes", "2"], "join_timeout: '1e30'"),
        ({}, ["--monitor_interval", "1e300"], "--monitor_interval: '1e300'"),
    ]
    for env, args, needle in cases:
        r = run([*args, "/bin/true"], env=clean_env(**env), timeout=20)
        lines = [l for l in r.err.splitlines() if l.strip()]
        assert r.rc == 2 and len(lines) == 1 and needle in lines[0], (env, args, r)


# --- item 17: --print-env-detect on an inconsistent Slurm environment -------------------------

def test_print_env_detect_shows_what_it_found_before_the_error(tmp):
    env = clean_env(SLURM_JOB_ID="77", SLURM_NODEID="5", SLURM_NNODES="2",
                    SLURM_JOB_NODELIST="n[1-2]", SLURM_STEP_ID="0")
    r = run(["--print-env-detect"], env=env, timeout=20)
    assert r.rc == 2, r
    # Each variable on its own line, before the line that says what is wrong with them.
    found = r.out.split("scheduler detection failed")[0]
    assert "  SLURM_NODEID=5\n" in found and "  SLURM_NNODES=2\n" in found, r
    assert "scheduler detection failed: inconsistent Slurm environment" in r.out, r
    assert ddprun_lines(r.err), r


# --- item 18: prefixes, error time, man page ---------------------------------------------------

PREFIXED = """
    import os, sys
    r = os.environ["RANK"]
    print(f"[rank{r}]: Traceback (torch 2.x wrote this prefix)")
    print("plain line")
    print(f"<{r}> templated line")
    sys.stdout.flush()
    """


def test_lines_torch_already_prefixed_are_not_prefixed_twice(tmp):
    script = write_script(tmp, "prefixed.py", PREFIXED)
    r = run(["--nproc-per-node", "2", script], timeout=60)
    assert r.rc == 0, r
    for rank in (0, 1):
        assert f"[rank{rank}]: Traceback" in r.out, r
        assert f"[rank{rank}]:[rank{rank}]:" not in r.out, r
        assert f"[rank{rank}]:plain line" in r.out, r
    r = run(["--nproc-per-node", "2", "--log-line-prefix-template", "<${rank}>", script],
            timeout=60)
    assert r.rc == 0, r
    for rank in (0, 1):
        assert f"<{rank}> templated line" in r.out and f"<{rank}><{rank}>" not in r.out, r
        assert f"<{rank}>plain line" in r.out, r


def test_error_time_is_a_time(tmp):
    stamp = 1796454227
    script = write_script(tmp, "fail.py", f"""
        import json, os, sys
        with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump({{"message": {{"message": "boom", "extraInfo": {{
                "py_callstack": "Traceback: here", "timestamp": "{stamp}"}}}}}}, f)
        sys.exit(1)
        """)
    r = run([script], env=clean_env(TZ="UTC"), timeout=60)
    assert r.rc == 1, r
    want = datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S+0000")
    assert f"error time : {want}" in r.err, r


def test_man_page_lists_every_exit_code_of_the_readme(tmp):
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    table = readme.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    codes = set(re.findall(r"^\| (\d+) ", table, re.M))
    with open(os.path.join(ROOT, "packaging", "man", "ddprun.h2m")) as f:
        man = f.read()
    exit_status = man.split("[EXIT STATUS]", 1)[1].split("\n[", 1)[0]
    missing = [c for c in sorted(codes) if not re.search(rf"\b{c}\b", exit_status)]
    assert codes and not missing, f"EXIT STATUS lacks {missing}:\n{exit_status}"


# --- item 19 (issue 36 item 7): lines over 1 MiB reach the console whole ---------------------

LONG_LINES = """
    import os, sys, time
    rank = int(os.environ["RANK"])
    if rank == 0:
        # A 3 MiB JSON line written in pieces, as a logger flushing its buffer would.
        line = '{"k": "' + "x" * (3 << 20) + '"}\\n'
        time.sleep(0.5)
        for i in range(0, len(line), 1 << 19):
            sys.stdout.write(line[i:i + (1 << 19)])
            sys.stdout.flush()
            time.sleep(0.05)
        sys.stdout.write("short 0\\n")
    else:
        for i in range(400):  # while rank 0's line is open: they wait, then come whole
            sys.stdout.write(f"line {i} of rank 1\\n")
            sys.stdout.flush()
            time.sleep(0.005)
    """


def test_lines_over_1_mib_reach_the_console_whole(tmp):
    script = write_script(tmp, "long.py", LONG_LINES)
    big = '{"k": "' + "x" * (3 << 20) + '"}'
    for mode in (["--no-prefix"], []):
        log_dir = os.path.join(tmp, "logs" + str(len(mode)))
        r = run([*mode, "--nproc-per-node", "2", "--tee", "1", "--log-dir", log_dir, script],
                timeout=60)
        assert r.rc == 0, r
        assert not [l for l in ddprun_lines(r.err) if "longer than 1 MiB" in l], r.err[-2000:]
        lines = r.out.split("\n")
        assert lines[-1] == "", lines[-1][:100]
        prefix = "" if mode else "[rank0]:"
        # One line, identical: jq would read it.
        assert lines.count(prefix + big) == 1, [len(l) for l in lines if len(l) > 1000]
        json.loads(big)
        other = [l for l in lines if "of rank 1" in l]
        want = [("" if mode else "[rank1]:") + f"line {i} of rank 1" for i in range(400)]
        assert other == want, other[:5]
        assert len(lines) == 1 + 1 + 400 + 1, len(lines)
        logs = [os.path.join(d, f) for d, _, fs in os.walk(log_dir) for f in fs
                if f == "stdout.log" and os.sep + "0" + os.sep in os.path.join(d, f)]
        with open(logs[0]) as f:
            assert f.read() == big + "\nshort 0\n"


ENDLESS = """
    import os, sys, time
    rank = int(os.environ["RANK"])
    out = sys.stdout.buffer
    start = time.time()
    if rank == 0:
        # An endless line (binary junk, a progress bar with \\r): 1 MiB, then 256 KiB every 0.1 s,
        # never a newline.
        out.write(b"x" * (1 << 20))
        out.flush()
        while time.time() - start < 10:
            out.write(b"x" * (1 << 18))
            out.flush()
            time.sleep(0.1)
    else:
        for i in range(100):
            out.write(f"tick {i} {time.time():.3f}\\n".encode())
            out.flush()
            time.sleep(0.1)
    """


def test_an_endless_line_stalls_the_others_once_not_every_mib(tmp):
    """issue 36 item 7: a rank writing without newlines holds the console; the first time other
    ranks wait behind it they wait kLongLineHold (3 s) and it is cut; after that its long lines
    are cut as soon as another rank's line waits, until it writes a newline. Before, the others
    waited 3 s again for every MiB it wrote (here: ticks written 5 s on waited ~3 s)."""
    script = write_script(tmp, "endless.py", ENDLESS)
    proc = start(["--nproc-per-node", "2", script], env=clean_env())
    arrivals = []  # (arrival time, line)
    xs = [0]

    def reader():
        fd = proc.stdout.fileno()
        rest = b""
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            now = time.time()
            rest += chunk
            *lines, rest = rest.split(b"\n")
            for line in lines:
                if line.startswith(b"[rank1]:tick "):
                    arrivals.append((now, line.decode()))
                else:
                    xs[0] += line.count(b"x")
        xs[0] += rest.count(b"x")
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        proc.wait(timeout=60)
        t.join(timeout=30)
        err = proc.stderr.read()
    finally:
        stop(proc)
    assert proc.returncode == 0, (proc.returncode, err[-2000:])
    ticks = [(now, int(line.split()[1]), float(line.split()[2])) for now, line in arrivals]
    assert [i for _, i, _ in ticks] == list(range(100)), [i for _, i, _ in ticks][:10]
    assert xs[0] > (1 << 20) and xs[0] % (1 << 18) == 0, xs[0]  # every byte of the line came
    first = ticks[0][2]
    late = [(now - wrote, i) for now, i, wrote in ticks if wrote - first >= 5]
    worst = max(late)
    print(f"  worst wait of a tick written 5 s on or later: {worst[0]:.2f} s (tick {worst[1]}); "
          f"all ticks: {max(now - wrote for now, _, wrote in ticks):.2f} s", flush=True)
    assert worst[0] < 1.5, worst
    notices = [l for l in ddprun_lines(err) if "longer than 1 MiB" in l]
    assert len(notices) == 1 and "waiting 3 s" in notices[0], err[-2000:]


if __name__ == "__main__":
    main(globals())
