"""Real PyTorch TCPStore clients against ddprun-store.

Run with /usr/bin/python3 (Debian torch 1.13, protocol G1) or the pyenv python3 (torch 2.x, G2):
  python torch_store_test.py STORE_BIN api      every store command the installed client has
  python torch_store_test.py STORE_BIN gloo     init_process_group("gloo") + all_reduce, 2 processes
  python torch_store_test.py STORE_BIN mixed G1_PYTHON
                                                a 1.13 client and this 2.x client share keys
  python torch_store_test.py STORE_BIN torchrun torchrun's c10d rendezvous (agent side) on our store,
                                                2 gloo workers
"""
import datetime
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_harness import running_store, run_children  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

TIMEOUT = datetime.timedelta(seconds=30)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def client(port, **kw):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT, **kw)


def check_api(port):
    s = client(port, world_size=1)  # world_size: the client ADDs init/ like a real worker
    s.set("k1", "v1")
    expect(s.get("k1") == b"v1", "get after set")
    expect(s.add("cnt", 5) == 5 and s.add("cnt", -2) == 3, "add")
    expect(s.get("cnt") == b"3", "counter stored as decimal text")
    expect(s.compare_set("k1", "v1", "v2") == b"v2", "compare_set match")
    expect(s.compare_set("k1", "zz", "v3") == b"v2", "compare_set mismatch returns current")
    expect(s.compare_set("fresh", "", "init") == b"init", "compare_set creates with empty expected")
    s.wait(["k1", "cnt"])
    try:
        s.wait(["never"], datetime.timedelta(milliseconds=200))
        raise AssertionError("wait on a missing key returned")
    except RuntimeError as e:
        expect("imeout" in str(e), f"wait timeout message: {e}")
    # The connection must still be in step after a timed-out wait: 1.13 sends no cancel, and the
    # server drops the stale registration when the next request arrives. (If *another* client
    # creates the key before this one sends anything, the STOP_WAITING already went out and the
    # 1.13 client misreads it; that is the 1.13 protocol's own defect, see docs/protocol.md.)
    s.set("never", "now")
    expect(s.get("k1") == b"v2", "connection usable after a wait timeout")
    expect(s.num_keys() == 5, f"num_keys counts init/ too: {s.num_keys()}")  # init/ k1 cnt fresh never
    expect(s.delete_key("never") is True and s.delete_key("never") is False, "delete_key")
    used = ["set", "get", "add", "compare_set", "wait", "num_keys", "delete_key"]
    if hasattr(s, "check"):
        expect(s.check(["k1"]) and not s.check(["k1", "nope"]), "check")
        used.append("check")
    if hasattr(s, "multi_get"):
        s.multi_set(["m1", "m2"], ["a", b"\x00\xff"])
        expect(s.multi_get(["m1", "m2"]) == [b"a", b"\x00\xff"], "multi_get/multi_set")
        s.append("m1", "bc")
        expect(s.get("m1") == b"abc", "append")
        used += ["multi_get", "multi_set", "append"]
    if hasattr(s, "queue_push"):
        s.queue_push("q", "one")
        s.queue_push("q", b"two")
        expect(s.queue_len("q") == 2, "queue_len")
        expect(s.queue_pop("q") == b"one" and s.queue_pop("q", block=False) == b"two", "queue_pop FIFO")
        used += ["queue_push", "queue_pop", "queue_len"]
    if hasattr(s, "list_keys"):
        keys = sorted(s.list_keys())
        expect(keys == ["cnt", "fresh", "k1", "m1", "m2"], f"list_keys hides init/: {keys}")
        used.append("list_keys")
    if hasattr(s, "barrier"):
        s.barrier("bar", 1)
        used.append("barrier")
    if hasattr(s, "clone"):
        c = s.clone()
        expect(c.get("k1") == b"v2", "clone opens a second validated connection")
        used.append("clone")
    print(f"torch {torch.__version__}: OK {' '.join(used)}")


def worker(rank, world):
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=TIMEOUT)
    t = torch.ones(4) * (rank + 1)
    dist.all_reduce(t)
    sub = dist.new_group([0, 1])
    u = torch.tensor([float(rank)])
    dist.all_reduce(u, group=sub)
    dist.barrier()
    print(f"rank {rank} result {t.tolist()} {u.item()}", flush=True)
    dist.destroy_process_group()


def check_gloo(port):
    world = 2
    envs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world), TORCHELASTIC_USE_AGENT_STORE="True",
                   TORCHELASTIC_RESTART_COUNT="0", OMP_NUM_THREADS="1")
        envs.append(env)
    argv = [sys.executable, os.path.abspath(__file__), "-", "worker"]
    outputs = run_children([argv + [str(r), str(world)] for r in range(world)], envs, timeout=120)
    for rank, (rc, out) in enumerate(outputs):
        expect(rc == 0, f"rank {rank} exited {rc}:\n{out}")
        expect(f"rank {rank} result [3.0, 3.0, 3.0, 3.0] 1.0" in out, f"rank {rank} wrong result:\n{out}")
    print(f"torch {torch.__version__}: OK gloo all_reduce with {world} processes")


def check_mixed(port, g1_python):
    # This interpreter is torch 2.x (G2); the other one is Debian's torch 1.13 (G1).
    s = client(port)
    s.set("from_g2", "hello")
    g1_script = (
        "import datetime, sys, torch.distributed as d\n"
        f"s = d.TCPStore('127.0.0.1', {port}, is_master=False, timeout=datetime.timedelta(seconds=30))\n"
        "assert s.get('from_g2') == b'hello'\n"
        "assert s.add('shared_cnt', 10) == 11\n"
        "s.set('from_g1', 'world')\n"
        "print('G1 OK', s.num_keys())\n")
    s.add("shared_cnt", 1)
    out = subprocess.run([g1_python, "-c", g1_script], capture_output=True, text=True, timeout=60)
    expect(out.returncode == 0, f"G1 client failed:\n{out.stdout}{out.stderr}")
    expect(s.get("from_g1") == b"world", "G2 sees the G1 key")
    expect(s.add("shared_cnt", 0) == 11, "one counter for both generations")
    print(f"torch {torch.__version__} + 1.13: OK shared key space ({out.stdout.strip()})")


WORKER_SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(2) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"torchrun worker {dist.get_rank()}/{dist.get_world_size()} result {t.tolist()}", flush=True)
dist.destroy_process_group()
"""


# Debian's torch 1.13 on Python 3.11: torchrun's Std.from_str returns None for the default
# "--redirects 0" (IntFlag iteration skips 0), which crashes it at start; map None to Std.NONE.
TORCHRUN_113_SHIM = """
import sys
import torch.distributed.elastic.multiprocessing.api as api
_orig = api.Std.from_str
api.Std.from_str = staticmethod(lambda vm: _orig(vm) or api.Std.NONE)
import torch.distributed.run as run
sys.exit(run.main())
"""


def check_torchrun(port):
    # The agent's c10d rendezvous runs entirely on our store: COMPARE_SET state machine on
    # /torch.rendezvous.<id>, WAIT+GET, MULTI_GET of role_info, MULTI_SET of assigned_ranks, the
    # exit barrier (ADD + SET + WAIT).
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(WORKER_SCRIPT)
    try:
        launcher = ["-c", TORCHRUN_113_SHIM] if torch.__version__.startswith("1.") else ["-m", "torch.distributed.run"]
        out = subprocess.run([sys.executable, *launcher, "--nnodes=1", "--nproc_per_node=2",
                              "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=ddprun-test",
                              "--monitor_interval=0.1", f.name],
                             capture_output=True, text=True, timeout=150, env=dict(os.environ, OMP_NUM_THREADS="1"))
    finally:
        os.unlink(f.name)
    text = out.stdout + out.stderr
    expect(out.returncode == 0, f"torchrun exited {out.returncode}:\n{text}")
    for rank in range(2):
        expect(f"torchrun worker {rank}/2 result [3.0, 3.0]" in text, f"worker {rank} missing:\n{text}")
    print(f"torch {torch.__version__}: OK torchrun c10d rendezvous on ddprun-store, 2 gloo workers")


def main():
    if sys.argv[2] == "worker":
        worker(int(sys.argv[3]), int(sys.argv[4]))
        return
    store_bin, mode = sys.argv[1], sys.argv[2]
    with running_store(store_bin) as (port, read_log):
        if mode == "api":
            check_api(port)
        elif mode == "gloo":
            check_gloo(port)
        elif mode == "torchrun":
            check_torchrun(port)
        elif mode == "mixed":
            check_mixed(port, sys.argv[3])
        else:
            raise SystemExit(f"unknown mode {mode}")
        log = read_log()
        expect("closing connection" not in log, f"the store closed a real client's connection:\n{log}")


if __name__ == "__main__":
    main()
