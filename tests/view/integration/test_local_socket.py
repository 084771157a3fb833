# SPDX-License-Identifier: MIT
"""`ddprun top` finds a local job started without --status-port (issue 36, "What to build" 4;
docs/health.md, "Seeing a job"): every ddprun serves /status and /healthz on a Unix socket in its
run directory (mode 0600, removed at the end) and names it in its beacon; `top` and `top --once`
read it when the beacon has no TCP port. A SIGKILLed ddprun's socket and beacon (and a beacon
whose pid was reused) do not confuse it; with no job, one line and exit 69. A run directory too
deep for a socket path (107 bytes) puts the socket in the short directory the heartbeat sockets
use. Real ddprun processes, `top --once`, and `top` under a real tmux."""
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import DDPRUN, Skip, clean_env, main, start, stop, wait_until  # noqa: E402

JOB = r"""
import os, sys, time
marker = sys.argv[1]
deadline = time.monotonic() + 60
while not os.path.exists(marker) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(3 if os.environ["RANK"] == "1" else 0)
"""


def private_env(tmp, **extra):
    """A beacon directory of this test's own: other jobs on the machine are not seen."""
    xdg = os.path.join(tmp, "xdg")
    os.makedirs(xdg, mode=0o700, exist_ok=True)
    return clean_env(XDG_RUNTIME_DIR=xdg, COLUMNS="200", LINES="50", **extra)


def beacons(tmp):
    d = os.path.join(tmp, "xdg", "ddprun")
    out = []
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if name.startswith("status-") and name.endswith(".json"):
            with open(os.path.join(d, name)) as f:
                out.append(json.load(f))
    return out


def top_once(tmp, env):
    return subprocess.run([DDPRUN, "top", "--once"], capture_output=True, text=True, timeout=30,
                          cwd=tmp, env=env)


def http_over_unix(path, target):
    """GET over the Unix socket with a Host no TCP endpoint would accept: the socket has no Host
    check (no browser page can reach it)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: anything.example\r\nConnection: close\r\n\r\n"
              .encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def start_job(tmp, env, *extra):
    job = os.path.join(tmp, "job.py")
    with open(job, "w") as f:
        f.write(JOB)
    marker = os.path.join(tmp, "go")
    proc = subprocess.Popen([DDPRUN, "--nproc-per-node", "2", *extra, job, marker],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp,
                            start_new_session=True, text=True, errors="replace")
    return proc, marker


def test_top_finds_a_job_started_without_status_port(tmp):
    env = private_env(tmp)
    # No job yet: one line, exit 69 (nothing to look at), as documented.
    r = top_once(tmp, env)
    assert r.returncode == 69, r
    assert r.stderr.count("\n") == 1 and "no running ddprun found" in r.stderr, r.stderr
    proc, marker = start_job(tmp, env)
    tmux = f"ddprun-sock-{os.getpid()}"
    try:
        wait_until(lambda: beacons(tmp), 30, "the job's beacon")
        beacon = beacons(tmp)[0]
        assert beacon["port"] == 0 and beacon["pid"] == proc.pid, beacon
        path = beacon["socket"]
        st = os.lstat(path)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
        assert st.st_uid == os.getuid()
        assert os.path.basename(path) == "status.sock"
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        assert http_over_unix(path, "/healthz") == (200, "ok\n")
        out = {}

        def shows_ranks():
            r = top_once(tmp, env)
            out["r"] = r
            return r.returncode == 0 and "RANK" in r.stdout and r.stdout.count("running") >= 2
        wait_until(shows_ranks, 30, f"top --once showing both ranks: {out.get('r')}")
        print(out["r"].stdout, flush=True)
        assert f"pid {proc.pid} (unix socket)" in out["r"].stdout, out["r"].stdout
        # The full-screen top under a real tmux (80x24) finds it the same way.
        if shutil.which("tmux"):
            subprocess.run(["tmux", "kill-session", "-t", tmux], capture_output=True)
            subprocess.run(["tmux", "new-session", "-d", "-s", tmux, "-x", "80", "-y", "24",
                            "env -i PATH=/usr/bin:/bin TERM=xterm HOME=/tmp "
                            f"XDG_RUNTIME_DIR={env['XDG_RUNTIME_DIR']} bash --norc --noprofile"],
                           check=True)

            def pane():
                return subprocess.run(["tmux", "capture-pane", "-p", "-t", tmux],
                                      capture_output=True, text=True).stdout
            subprocess.run(["tmux", "send-keys", "-t", tmux,
                            f"cd {tmp} && {DDPRUN} top; echo TOP-EXIT=$?", "Enter"], check=True)
            wait_until(lambda: "RANK" in pane() and "(unix socket)" in pane(), 30, f"top\n{pane()}")
            assert "q quits" in pane(), pane()  # the keys' line is not pushed off at 80 columns
            print(pane(), flush=True)
            subprocess.run(["tmux", "send-keys", "-t", tmux, "q"], check=True)
            wait_until(lambda: "TOP-EXIT=0" in pane(), 10, f"top quits on q\n{pane()}")
        # The end: a viewer asked for /status, so the socket serves the final state a while.
        open(marker, "w").close()
        ended = {}

        def shows_end():
            r = top_once(tmp, env)
            ended["r"] = r
            return "the job ended: failed, exit 3" in r.stdout
        wait_until(shows_end, 30, f"the end on top --once: {ended.get('r')}")
        assert ended["r"].returncode == 3, ended["r"]
        proc.wait(timeout=30)
        assert proc.returncode == 3, proc.returncode
        # Gone with ddprun: the socket and the beacon.
        assert not os.path.exists(path), path
        assert beacons(tmp) == []
    finally:
        subprocess.run(["tmux", "kill-session", "-t", tmux], capture_output=True)
        stop(proc)


def test_a_killed_ddprun_leaves_nothing_that_confuses_top(tmp):
    env = private_env(tmp)
    logs = os.path.join(tmp, "logs")  # a run directory that stays after a SIGKILL
    proc, marker = start_job(tmp, env, "--log-dir", logs)
    try:
        wait_until(lambda: beacons(tmp), 30, "the job's beacon")
        path = beacons(tmp)[0]["socket"]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        stop(proc)
    assert os.path.exists(path), "the SIGKILLed ddprun's socket file stays (nobody removes it)"
    assert len(beacons(tmp)) == 1
    # Its beacon and socket: not a job. One line, exit 69, at once (no connect to the dead socket).
    t0 = time.monotonic()
    r = top_once(tmp, env)
    assert r.returncode == 69 and "no running ddprun found" in r.stderr, r
    assert time.monotonic() - t0 < 10
    # A beacon whose pid now belongs to another process (this test's own, alive) naming the dead
    # socket, newer than anything: its start time differs, so it is dropped and removed.
    fake = os.path.join(tmp, "xdg", "ddprun", f"status-{os.getpid()}.json")
    with open(fake, "w") as f:
        json.dump({"pid": os.getpid(), "cwd": tmp, "address": "127.0.0.1", "port": 0,
                   "socket": path, "host": "h", "started": time.time() + 1e6,
                   "proc_start": 1}, f)
    proc2, marker2 = start_job(tmp, env, "--log-dir", logs)
    try:
        wait_until(lambda: any(b["pid"] == proc2.pid for b in beacons(tmp)), 30, "the new beacon")
        out = {}

        def live_job():
            r = top_once(tmp, env)
            out["r"] = r
            return r.returncode == 0 and "RANK" in r.stdout
        wait_until(live_job, 30, f"top --once on the live job: {out.get('r')}")
        assert not os.path.exists(fake), "the reused pid's beacon was removed"
        open(marker2, "w").close()
        proc2.wait(timeout=30)
    finally:
        stop(proc2)


def test_top_believes_only_the_beacons_ddprun_at_the_socket(tmp):
    """A run directory removed under a running job (a tmp cleaner) can be re-created by someone
    else with a socket of their own at the same path: `top` must not show that process's text as
    the job. Same user, another pid: refused (SO_PEERCRED), one line, exit 69."""
    env = private_env(tmp)
    proc, marker = start_job(tmp, env)
    impostor = None
    try:
        wait_until(lambda: beacons(tmp), 30, "the job's beacon")
        path = beacons(tmp)[0]["socket"]
        wait_until(lambda: top_once(tmp, env).returncode == 0, 30, "top on the real job")
        os.unlink(path)  # the real ddprun still runs and still has its beacon
        served = os.path.join(tmp, "served")
        impostor = subprocess.Popen([sys.executable, "-c", f"""
import os, socket
s = socket.socket(socket.AF_UNIX); s.bind({path!r}); s.listen(4)
body = b'{{"state":"succeeded","exit_code":42,"ranks":[]}}'
while True:
    c, _ = s.accept()
    if c.recv(65536): open({served!r}, "a").write("x")  # a request came
    c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: "
              + str(len(body)).encode() + b"\\r\\nConnection: close\\r\\n\\r\\n" + body)
    c.close()
"""])
        wait_until(lambda: os.path.exists(path), 30, "the impostor's socket")
        r = top_once(tmp, env)
        assert r.returncode == 69, r
        assert "not by this user's ddprun" in r.stderr and r.stderr.count("\n") == 1, r
        assert "42" not in r.stdout, r
        assert not os.path.exists(served), "the request reached the impostor"
        open(marker, "w").close()
        proc.wait(timeout=30)
    finally:
        if impostor:
            impostor.kill()
            impostor.wait()
        stop(proc)


NOBODY = 65534


def test_a_squatted_beacon_directory_is_named_in_one_line(tmp):
    """Another user made /tmp/ddprun-<uid> before this user's first job (or made it 0755): the
    beacon is not written there (that user could read or replace it), and both ddprun and `top`
    say so in one line instead of a silent "no running ddprun found". Run as uid 65534 (nobody),
    whose directory root squats, so the machine's own /tmp/ddprun-<uid> is untouched."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        raise Skip("needs root and setpriv to act as uid 65534")
    squat = f"/tmp/ddprun-{NOBODY}"
    if os.path.lexists(squat):
        raise Skip(f"{squat} exists already")
    os.mkdir(squat, 0o755)  # root's, not nobody's
    os.chmod(tmp, 0o755)
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    env = clean_env(HOME="/tmp")
    env.pop("XDG_RUNTIME_DIR", None)
    try:
        r = subprocess.run([*as_nobody, DDPRUN, "--nproc-per-node", "1", "--no-python", "true"],
                           capture_output=True, text=True, timeout=60, cwd="/tmp", env=env)
        assert r.returncode == 0, r
        lines = [l for l in r.stderr.splitlines() if "status beacon" in l]
        assert lines == [f"ddprun: warning: no status beacon: {squat} belongs to uid 0, not to this "
                         f"user (uid {NOBODY}); `ddprun top` finds this job only with HOST:PORT of "
                         "--status-port (remove that directory or set XDG_RUNTIME_DIR to a private "
                         "one)"], r.stderr
        top = subprocess.run([*as_nobody, DDPRUN, "top", "--once"], capture_output=True, text=True,
                             timeout=30, cwd="/tmp", env=env)
        assert top.returncode == 69, top
        assert f"{squat} belongs to uid 0, not to this user" in top.stderr, top.stderr
        assert top.stderr.count("\n") == 1, top.stderr
        # A directory of nobody's own but open to others (0777): refused too, named by its mode.
        os.chown(squat, NOBODY, NOBODY)
        os.chmod(squat, 0o777)
        top = subprocess.run([*as_nobody, DDPRUN, "top", "--once"], capture_output=True, text=True,
                             timeout=30, cwd="/tmp", env=env)
        assert top.returncode == 69 and f"{squat} has mode 0777, not 0700" in top.stderr, top
    finally:
        shutil.rmtree(squat, ignore_errors=True)


def test_a_run_directory_too_deep_for_a_socket_path(tmp):
    env = private_env(tmp)
    deep = os.path.join(tmp, *(["d" * 40] * 3))  # the run directory's paths: well over 107 bytes
    proc, marker = start_job(tmp, env, "--log-dir", deep, "--status-linger", "0")
    try:
        wait_until(lambda: beacons(tmp), 30, "the job's beacon")
        path = beacons(tmp)[0]["socket"]
        assert len(path) < 108 and not path.startswith(deep), path
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        out = {}

        def shows():
            r = top_once(tmp, env)
            out["r"] = r
            return r.returncode == 0 and "RANK" in r.stdout
        wait_until(shows, 30, f"top --once: {out.get('r')}")
        open(marker, "w").close()
        proc.wait(timeout=30)
        _, err = proc.communicate(timeout=10)
        assert "status socket" not in err, err  # the fallback needs no word
        assert not os.path.exists(os.path.dirname(path)), "the short directory is removed"
    finally:
        stop(proc)


if __name__ == "__main__":
    main(globals())
