# SPDX-License-Identifier: MIT
"""--store-proxy in a job: a one-node c10d job whose store is a real `ddprun-store --trace` (the
root), each worker WAITing on a key of its own through its node's proxy: the root sees the WAITs
as WATCH_KEYs on the proxy's one link and no WAIT. Against a root that does not take ddprun's
tagged mode (torch's libuv TCPStore, when `python3` has torch) the workers connect to the root
directly and the agent says so in one line.
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


def test_waits_go_on_the_proxy_link(tmp):
    r, trace, port = job_against_traced_root(tmp, "default", [])
    check_workers_used_the_proxy(r, port)
    seen = waits_seen(trace)
    assert "WAIT" not in seen, seen
    assert seen.get("WATCH_KEY") == {"h13proxy/rank0", "h13proxy/rank1"}, seen


LIBUV_ROOT = r"""
import sys, time
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False)
print(s.port, flush=True)
sys.stdin.readline()
"""


def test_a_root_without_tagged_mode_means_workers_connect_directly(tmp):
    probe = subprocess.run(["python3", "-c", "import torch.distributed"], capture_output=True)
    if probe.returncode != 0:
        print("SKIP: python3 has no torch (no libuv root to try)")
        return
    root = subprocess.Popen(["python3", "-c", LIBUV_ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        port = int(root.stdout.readline())
        r = run(["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--nnodes", "1",
                 "--nproc_per_node", "2", "--store-proxy", "on", "--python", sys.executable, WORKER],
                timeout=90)
    finally:
        root.stdin.close()
        root.wait(timeout=10)
    assert r.rc == 0, r
    masters = set(re.findall(r"PROXY_WAIT key=\S+ master=(\S+)", r.out))
    assert masters == {f"127.0.0.1:{port}"}, (masters, r)  # the root's own address
    lines = [l for l in r.err.splitlines() if "--store-proxy: the root store does not take" in l]
    assert len(lines) == 1 and "the workers connect to it directly" in lines[0], r.err


def test_a_bad_bound_is_one_line_and_exit_2(tmp):
    for value, words in (("-3", "-3 is out of range"), ("0", "0 is out of range"),
                         ("many", "'many' is not a whole number")):
        r = run(["--store-proxy", "on", "--store-proxy-max-watched-keys", value, WORKER])
        assert r.rc == 2, r
        assert f"--store-proxy-max-watched-keys: {words}" in r.err and r.err.count("\n") == 1, r
    r = run([WORKER], env=clean_env(DDPRUN_STORE_PROXY_MAX_WATCHED_KEYS="x"))
    assert r.rc == 2 and "--store-proxy-max-watched-keys: 'x' is not a whole number" in r.err, r


if __name__ == "__main__":
    main(globals())
