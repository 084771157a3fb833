# SPDX-License-Identifier: MIT
"""A gloo worker for restarts and re-forms: every attempt forms a gloo world through ddprun's store
and all-reduces rank + 1, then prints `GLOO attempt=<n> rank=<r> world=<w> sum=<s>`.
Mode `fail_once`: on attempt 0, rank 1 exits 3 after the barrier (the others wait to be stopped).
Mode `wait_once`: on attempt 0 every rank waits to be stopped (a test kills an agent meanwhile).
A rank whose agent vanished (its parent changed) exits at once."""
import os
import sys
import time

import torch
import torch.distributed as dist

mode = sys.argv[1]
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
parent = os.getppid()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.ones(1) * (rank + 1)
dist.all_reduce(t)
# After the barrier: once every rank's line is out, no rank still needs its peers (a test that
# kills an agent on seeing the lines must not break a barrier still under way).
dist.barrier()
print(f"GLOO attempt={attempt} rank={rank} world={world} sum={int(t.item())}", flush=True)
if attempt == 0:
    if mode == "fail_once" and rank == 1:
        os._exit(3)
    for _ in range(1200):  # bounded: 120 s
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(0.1)
dist.destroy_process_group()
