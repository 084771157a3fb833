#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Issue 35, item 15: what a forked worker (as --preload torch forks them) pays for the interpreter's
exit after sys.exit(3), with and without gc.freeze() in the parent before the fork.

  python3 bench/launcher/fork_exit_cost.py 0|1

The child's exit is CPython's finalization (garbage collection and module teardown over every
object torch created at import), which in a forked child also copies the pages it touches."""
import gc
import os
import sys
import time

import torch  # what --preload torch imports
import torch.distributed  # noqa: F401
freeze = sys.argv[1] == "1"
res = []
for _ in range(3):
    if freeze:
        gc.freeze()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        x = torch.ones(1000)  # some work of its own
        os.write(w, repr(time.time()).encode()); os.close(w)
        sys.exit(3)  # the interpreter's whole exit, as a failing script's
    os.close(w)
    t = float(os.read(r, 64)); os.close(r)
    os.waitpid(pid, 0)
    res.append(time.time() - t)
    if freeze:
        gc.unfreeze()
print(f"gc.freeze before fork={freeze}: child's exit after sys.exit(3): " + ", ".join(f"{x:.3f}" for x in res) + " s")
