# SPDX-License-Identifier: MIT
"""The status endpoint scraped by a real Prometheus server (and checked by promtool), /healthz
turning 503 once hung, and restarts that stop when they make no progress. No torch needed.
Usage: test_health_status.py [test names]"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "launcher", "integration"))
from harness import clean_env, main, read_events, run, start, stop, wait_until  # noqa: E402

JOBS = os.path.join(HERE, "jobs")


def get(url):
    """(status, body) of a GET; HTTP errors are answers too."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_status_endpoints_and_a_real_prometheus_scrape(tmp):
    events = os.path.join(tmp, "events.jsonl")
    proc = start(["--nproc-per-node", "2", "--status-port", "0", "--events", events,
                  os.path.join(JOBS, "heartbeat_only.py"), "--steps", "400", "--every", "0.05"])
    prom = None
    try:
        port = status_port(events)
        base = f"http://127.0.0.1:{port}"
        code, body = get(base + "/healthz")
        assert code == 200 and body == "ok\n", (code, body)

        def stepping():
            st = json.loads(get(base + "/status")[1])
            return all(r["last_step"] for r in st["ranks"])
        wait_until(stepping, 30, "steps in /status")
        st = json.loads(get(base + "/status")[1])
        assert st["phase"] == "running" and st["attempt"] == 0 and st["nodes"] == 1, st
        assert [r["rank"] for r in st["ranks"]] == [0, 1], st
        assert all(r["pid"] > 0 and r["state"] == "running" for r in st["ranks"]), st
        assert st["progress_source"] == "heartbeat", st
        code, metrics = get(base + "/metrics")
        assert code == 200, code
        assert 'ddprun_rank_step{rank="1",local_rank="1"}' in metrics, metrics
        assert get(base + "/nope")[0] == 404
        promtool = shutil.which("promtool")
        prometheus = shutil.which("prometheus")
        if not promtool or not prometheus:
            print("prometheus not installed; scrape skipped")
            return
        check = subprocess.run([promtool, "check", "metrics"], input=metrics, text=True,
                               capture_output=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    f"scrape_configs:\n  - job_name: ddprun\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{port}']\n")
        prom_port = free_port()
        prom = subprocess.Popen([prometheus, f"--config.file={config}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}",
                                 f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        api = f"http://127.0.0.1:{prom_port}/api/v1/query?query="
        scraped = {}

        def has_steps():
            try:
                answer = json.loads(get(api + "ddprun_rank_step")[1])
            except (OSError, ValueError):
                return False
            scraped["steps"] = answer.get("data", {}).get("result", [])
            return len(scraped["steps"]) == 2
        wait_until(has_steps, 60, "Prometheus to scrape ddprun_rank_step for both ranks")
        assert sorted(r["metric"]["rank"] for r in scraped["steps"]) == ["0", "1"], scraped
        assert all(float(r["value"][1]) > 0 for r in scraped["steps"]), scraped
        up = json.loads(get(api + "up")[1])["data"]["result"]
        assert up and up[0]["value"][1] == "1", up
    finally:
        if prom:
            prom.terminate()
            try:
                prom.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(prom.pid, signal.SIGKILL)
                prom.wait()
        stop(proc)


STORE_CLIENT = """import os, socket, struct, time
# One raw torch 1.13 (G1) ADD on the job's store, then a heartbeat per step.
c = socket.create_connection((os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])))
key = b'/probe'
c.sendall(b'\\x03' + struct.pack('<Q', len(key)) + key + struct.pack('<q', 1))
reply = b''
while len(reply) < 8:
    reply += c.recv(8 - len(reply))
hb = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for step in range(1, 400):
    hb.sendto(b'step %d' % step, os.environ['DDPRUN_HEARTBEAT_SOCKET'])
    time.sleep(0.05)
"""


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def test_store_connections_and_ops_in_metrics(tmp):
    script = os.path.join(tmp, "store_client.py")
    with open(script, "w") as f:
        f.write(STORE_CLIENT)
    events = os.path.join(tmp, "events.jsonl")
    proc = start(["--nproc-per-node", "2", "--status-port", "0", "--events", events, script])
    try:
        base = f"http://127.0.0.1:{status_port(events)}"
        found = {}

        def both_added():
            found["m"] = get(base + "/metrics")[1]
            return (metric(found["m"], 'ddprun_store_requests_total{op="add"}') or 0) >= 2
        wait_until(both_added, 30, "both ranks' ADD in ddprun_store_requests_total")
        m = found["m"]
        assert metric(m, "ddprun_store_connections_accepted_total") >= 2, m
        assert metric(m, "ddprun_store_connections") is not None, m
        assert metric(m, 'ddprun_store_requests_total{op="set"}') is not None, m
        assert metric(m, "ddprun_store_keys") >= 1, m
        promtool = shutil.which("promtool")
        if promtool:
            check = subprocess.run([promtool, "check", "metrics"], input=m, text=True,
                                   capture_output=True, timeout=60)
            assert check.returncode == 0, check.stdout + check.stderr
        else:
            print("promtool not installed; check skipped")
    finally:
        stop(proc)


def test_healthz_turns_503_once_hung(tmp):
    script = os.path.join(tmp, "stubborn.py")
    with open(script, "w") as f:
        # Hung and deaf to SIGTERM: the stop takes the whole shutdown timeout.
        f.write("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "print('started', flush=True)\ntime.sleep(600)\n")
    events = os.path.join(tmp, "events.jsonl")
    proc = start(["--status-port", "0", "--hang-timeout", "1", "--shutdown-timeout", "5",
                  "--events", events, script])
    try:
        base = f"http://127.0.0.1:{status_port(events)}"
        seen = {}

        def unhealthy():
            code, body = get(base + "/healthz")
            seen["last"] = (code, body)
            return code == 503
        wait_until(unhealthy, 30, "/healthz to answer 503")
        assert seen["last"][1] == "hung\n", seen
        assert json.loads(get(base + "/status")[1])["phase"] == "hung"
        assert "ddprun_hang_verdicts_total 1" in get(base + "/metrics")[1]
        assert proc.wait(timeout=60) == 75
    finally:
        stop(proc)


def test_a_slow_starting_rank_is_not_a_hang(tmp):
    # docs/reliability.md "Zygote faults": rank 0 prints at once and then waits (as in a
    # collective) for rank 1, which takes 8 s to print its first line. The startup timeout lasts
    # until every rank progressed; before the fix rank 0's line ended it and --hang-timeout 4 later
    # the job was judged hung (75) while it was only starting.
    script = os.path.join(tmp, "slow_start.py")
    with open(script, "w") as f:
        f.write("import os, time\n"
                "if os.environ['LOCAL_RANK'] == '1':\n    time.sleep(8)\n"
                "print('started', flush=True)\n"
                "if os.environ['LOCAL_RANK'] == '0':\n    time.sleep(8.5)\n")
    events = os.path.join(tmp, "events.jsonl")
    r = run(["--nproc_per_node", "2", "--hang-timeout", "4", "--hang-startup-timeout", "30",
             "--events", events, script], timeout=60)
    assert r.rc == 0, r
    assert not [e for e in read_events(events) if e["event"] == "hang"], r


def test_restarts_stop_when_they_reach_no_new_step(tmp):
    events = os.path.join(tmp, "events.jsonl")
    r = run(["--max-restarts", "10", "--no-progress-restarts", "2", "--events", events,
             os.path.join(JOBS, "heartbeat_only.py"), "--fail-after-step", "1"], timeout=60)
    assert r.rc == 1, r
    ev = read_events(events)
    assert len([e for e in ev if e["event"] == "restart"]) == 2, ev
    stopped = [e for e in ev if e["event"] == "no_progress_restarts"]
    assert stopped and stopped[0]["in_a_row"] == 2 and stopped[0]["best_step"] == 1, stopped
    assert "2 restart(s) in a row reached no step beyond 1 (--no-progress-restarts 2)" in r.err, r


def test_restarts_that_progress_use_every_restart(tmp):
    script = os.path.join(tmp, "progressing.py")
    with open(script, "w") as f:
        f.write("import os, socket, sys, time\n"
                "step = 10 * (1 + int(os.environ['TORCHELASTIC_RESTART_COUNT']))\n"
                "socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'step %d' % step,"
                " os.environ['DDPRUN_HEARTBEAT_SOCKET'])\n"
                "time.sleep(0.2)\nsys.exit(1)\n")
    events = os.path.join(tmp, "events.jsonl")
    r = run(["--max-restarts", "3", "--no-progress-restarts", "1", "--events", events, script],
            timeout=60)
    assert r.rc == 1, r
    ev = read_events(events)
    assert len([e for e in ev if e["event"] == "restart"]) == 3, ev
    assert not [e for e in ev if e["event"] == "no_progress_restarts"], ev


def test_a_slow_rank_is_reported_as_a_straggler(tmp):
    script = os.path.join(tmp, "uneven.py")
    with open(script, "w") as f:
        f.write("import os, socket, time\n"
                "rank = int(os.environ['RANK'])\n"
                "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                "every = 0.4 if rank == 2 else 0.05\n"
                "step = 0\n"
                "end = time.monotonic() + 6\n"
                "while time.monotonic() < end:\n"
                "    step += 1\n"
                "    s.sendto(b'step %d' % step, os.environ['DDPRUN_HEARTBEAT_SOCKET'])\n"
                "    time.sleep(every)\n")
    events = os.path.join(tmp, "events.jsonl")
    # A 2 s window instead of a minute (DDPRUN_STRAGGLER_WINDOW exists for this).
    r = run(["--nproc-per-node", "3", "--events", events, script], timeout=60,
            env=clean_env(DDPRUN_STRAGGLER_WINDOW="2"))
    assert r.rc == 0, r
    found = [e for e in read_events(events) if e["event"] == "straggler"]
    assert found and {e["rank"] for e in found} == {2}, found
    assert found[0]["steps_per_s"] < 0.5 * found[0]["median_steps_per_s"], found
    assert "rank 2 is a straggler" in r.err, r


def test_bad_health_flags_are_one_line_and_exit_2(tmp):
    for args, text in [(["--hang-timeout", "soon"], "--hang-timeout: 'soon'"),
                       (["--straggler-ratio", "2"], "--straggler-ratio: '2'"),
                       (["--status-port", "70000"], "--status-port"),
                       (["--no-progress-restarts", "-1"], "--no-progress-restarts")]:
        r = run(args + ["true"], timeout=30)
        assert r.rc == 2, (args, r)
        assert text in r.err and len(r.err.strip().splitlines()) == 1, (args, r)


if __name__ == "__main__":
    # Kept run directories (the stacks of hung jobs) go to a scratch TMPDIR removed at the end.
    with tempfile.TemporaryDirectory(prefix="ddprun_health_") as scratch:
        os.environ["TMPDIR"] = scratch
        main(globals())
