# SPDX-License-Identifier: MIT
"""--store-proxy-max-watched-keys reaches the node's store proxy: a one-node c10d job whose store
is a real `ddprun-store --trace` (the root), each worker WAITing on a key of its own through its
node's proxy. With the default the root sees the WAITs as WATCH_KEYs on the proxy's watch link
and no WAIT; with 0 (no watch link) it sees each WAIT itself, on a WAIT link.
Needs DDPRUN_STORE (the ddprun-store binary) besides DDPRUN; stdlib-only workers."""
import os
import re
import subprocess
import sys

from harness import clean_env, main, run

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "proxy_wait_worker.py")


def job_against_traced_root(tmp, name, extra):
    """Runs the job; returns (ddprun's Run, the root's --trace log, the root's port)."""
    err_path = os.path.join(tmp, f"{name}.root.err")
    with open(err_path, "w") as err:
        root = subprocess.Popen([os.environ["DDPRUN_STORE"], "--port", "0", "--trace"],
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        port = int(root.stdout.readline())
        r = run(["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--nnodes", "1",
                 "--nproc_per_node", "2", "--store-proxy", "on", *extra, "--python", sys.executable,
                 WORKER], timeout=60)
    finally:
        root.terminate()
        root.wait(timeout=10)
    with open(err_path) as f:
        return r, f.read(), port


def waits_seen(trace):
    """The root's trace lines of each kind for the workers' keys."""
    out = {}
    for op, key in re.findall(r"trace conn=\d+ G\d (\w+) '(h13proxy/rank\d)'", trace):
        out.setdefault(op, set()).add(key)
    return out


def check_workers_used_the_proxy(r, root_port):
    assert r.rc == 0, r
    lines = re.findall(r"PROXY_WAIT key=(\S+) master=(\S+)", r.out)
    assert sorted(k for k, _ in lines) == ["h13proxy/rank0", "h13proxy/rank1"], r
    masters = {m for _, m in lines}
    assert len(masters) == 1 and masters != {f"127.0.0.1:{root_port}"}, masters  # the proxy's address


def test_default_bound_waits_go_on_the_watch_link(tmp):
    r, trace, port = job_against_traced_root(tmp, "default", [])
    check_workers_used_the_proxy(r, port)
    seen = waits_seen(trace)
    assert "WAIT" not in seen, seen
    assert seen.get("WATCH_KEY") == {"h13proxy/rank0", "h13proxy/rank1"}, seen


def test_zero_watched_keys_sends_every_wait_upstream(tmp):
    r, trace, port = job_against_traced_root(tmp, "zero", ["--store-proxy-max-watched-keys", "0"])
    check_workers_used_the_proxy(r, port)
    seen = waits_seen(trace)
    assert seen.get("WAIT") == {"h13proxy/rank0", "h13proxy/rank1"}, seen
    assert "WATCH_KEY" not in seen, seen


def test_a_bad_bound_is_one_line_and_exit_2(tmp):
    for value, words in (("-3", "-3 is out of range"), ("many", "'many' is not a whole number")):
        r = run(["--store-proxy", "on", "--store-proxy-max-watched-keys", value, WORKER])
        assert r.rc == 2, r
        assert f"--store-proxy-max-watched-keys: {words}" in r.err and r.err.count("\n") == 1, r
    r = run([WORKER], env=clean_env(DDPRUN_STORE_PROXY_MAX_WATCHED_KEYS="x"))
    assert r.rc == 2 and "--store-proxy-max-watched-keys: 'x' is not a whole number" in r.err, r


if __name__ == "__main__":
    main(globals())
