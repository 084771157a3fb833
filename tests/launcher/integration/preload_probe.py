# SPDX-License-Identifier: MIT
"""What a worker observes of its own process, as JSON in $PROBE_DIR/<rank>.<attempt>.json, then
the exit that $PROBE_EXIT asks of rank $PROBE_RANK (test_preload.py compares exec'd and forked
workers)."""
MAIN_KEYS = sorted(k for k in globals())
import ctypes
import json
import os
import random
import resource
import signal
import sys
import threading

if os.environ.get("PROBE_TORCH", "1") == "1":
    import torch  # as a training script would; already imported in a forked worker
else:
    torch = None


def c_environ():
    libc = ctypes.CDLL(None)
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
    out, i = {}, 0
    while env[i] is not None:
        key, _, value = env[i].decode(errors="replace").partition("=")
        out[key] = value
        i += 1
    return out


def fd_kinds():
    kinds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor
        kinds[fd] = target.split(":")[0] if ":" in target else target
    return kinds


def proc_status(*keys):
    with open("/proc/self/status") as f:
        return {l.split(":")[0]: l.split(":", 1)[1].strip() for l in f if l.split(":")[0] in keys}


def pdeathsig():
    value = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
    return value.value


def stream(s):
    return {"line_buffering": s.line_buffering, "write_through": s.write_through,
            "buffer": type(s.buffer).__name__, "encoding": s.encoding, "errors": s.errors,
            "fileno": s.fileno()}


umask = os.umask(0)
os.umask(umask)
rank = os.environ["RANK"]
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
seen = {
    "main_keys": MAIN_KEYS, "name": __name__, "file": __file__, "spec": repr(__spec__),
    "loader": type(__loader__).__name__, "argv": sys.argv, "orig_argv": sys.orig_argv,
    "path0": sys.path[0], "path": sys.path, "cwd": os.getcwd(), "environ": dict(os.environ),
    "c_environ": c_environ(), "fds": fd_kinds(), "umask": umask,
    "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource)
                if n.startswith("RLIMIT_")},
    "handlers": {int(s): repr(signal.getsignal(s)) for s in signal.valid_signals()},
    "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "kernel_signals": proc_status("SigBlk", "SigIgn", "SigCgt"),
    "own_group": os.getpgrp() == os.getpid(), "own_session": os.getsid(0) == os.getpid(),
    "pdeathsig": pdeathsig(), "ppid": os.getppid(),
    "cgroup": open("/proc/self/cgroup").read(),
    "stdout": stream(sys.stdout), "stderr": stream(sys.stderr),
    "stdout_is_dunder": sys.stdout is sys.__stdout__, "flags": repr(sys.flags),
    "threads": threading.active_count(), "tasks": len(os.listdir("/proc/self/task")),
    "torch_seed": torch and torch.initial_seed(), "torch_draw": torch and torch.rand(1).item(),
    "matmul": torch and (torch.ones(256, 256) @ torch.ones(256, 256)).sum().item(),
    "random_draw": random.random(), "random_bits": random.getrandbits(64),
    "cmdline": open("/proc/self/cmdline").read().split("\0")[:4],
    "pid": os.getpid(), "token": os.environ.get("DDPRUN_JOB_TOKEN"),
}
path = os.path.join(os.environ["PROBE_DIR"], f"{rank}.{attempt}.json")
with open(path + ".tmp", "w") as f:
    json.dump(seen, f)
os.rename(path + ".tmp", path)
print(f"probe rank {rank} attempt {attempt}", flush=True)

if rank == os.environ.get("PROBE_RANK", "1"):
    how = os.environ.get("PROBE_EXIT", "")
    if how == "exit3":
        sys.exit(3)
    elif how == "exit_message":
        sys.exit("probe says goodbye")
    elif how == "raise":
        raise ValueError("probe failure")
    elif how == "os_exit5":
        os._exit(5)
    elif how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    elif how == "keyboard":
        raise KeyboardInterrupt
    elif how == "wait_file":  # the test does something, then lets the first attempt fail
        import time
        while not os.path.exists(os.path.join(os.environ["PROBE_DIR"], "go")):
            time.sleep(0.05)
        if attempt == "0":
            sys.exit(1)
