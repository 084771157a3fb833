#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Issue 35, item 15: what a worker pays for the interpreter's exit after sys.exit(3) with torch
imported: forked (as --preload torch forks them) with or without gc.freeze() in the parent before
the fork (the zygote freezes since 82e2d4e), or exec'd (a fresh interpreter, as without --preload
and under torchrun).

  python3 bench/launcher/fork_exit_cost.py 0|1|exec [runs]

Prints, per run, the time from the script's sys.exit to the end of its atexit handlers (an
atexit handler registered first runs last) and from there to the process's reaping: the
interpreter's finalization (collections, module teardown, C++ static destructors), which in a
forked child also copies every shared page it writes (copy-on-write)."""
import gc
import os
import subprocess
import sys
import time

CHILD = """
import atexit, os, sys, time
x = torch.ones(1000)  # some work of its own
t0 = time.time()
def last():
    os.write(W, repr((t0, time.time())).encode())
    os.close(W)
atexit.register(last)
sys.exit(3)  # the interpreter's whole exit, as a failing script's
"""

how = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
import torch  # noqa: E402  what --preload torch imports
import torch.distributed  # noqa: E402, F401
if how == "1":
    gc.collect()
    gc.freeze()
res = []
for _ in range(runs):
    r, w = os.pipe()
    if how == "exec":
        proc = subprocess.Popen([sys.executable, "-c", "import torch, torch.distributed\nW = %d\n"
                                 % w + CHILD], pass_fds=(w,))
        pid = proc.pid
    else:
        pid = os.fork()
        if pid == 0:
            os.close(r)
            exec(CHILD, {"torch": torch, "W": w})
    os.close(w)
    got = b""
    while True:
        chunk = os.read(r, 64)
        if not chunk:
            break
        got += chunk
    os.close(r)
    os.waitpid(pid, 0)
    t0, t_atexit = eval(got)
    res.append((t_atexit - t0, time.time() - t_atexit))
label = {"0": "forked", "1": "forked, gc.freeze() before the fork", "exec": "exec'd"}[how]
print(f"{label}: sys.exit -> atexit done, -> reaped: " +
      ", ".join(f"{a:.3f} + {b:.3f}" for a, b in res) + " s")
