# SPDX-License-Identifier: MIT
"""Worker for the etcd backend's tests: a real gloo world through the attempt's workers' store
(MASTER_ADDR:MASTER_PORT, served by the round's node 0), one all_reduce checked, then as told.
  ok          exit 0
  steps:N     N more all_reduces, 0.1 s apart (a job that runs a few seconds), then exit 0
  sleep_once  attempt 0 sleeps 60 s (until stopped); later attempts exit 0
  steps_once:N  attempt 0 as steps:N; later attempts exit 0 (a node lost mid-training)
  until:PATH  wait until PATH exists (every attempt), then exit 0
Prints 'GLOO rank=R world=W restart=N sum=S master=H:P' (S: the all_reduce of rank + 1)."""
import os
import sys
import time

import torch
import torch.distributed as dist

mode = sys.argv[1]
env = os.environ
dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(env["RANK"]) and world == int(env["WORLD_SIZE"]), (rank, world)
restart = int(env["TORCHELASTIC_RESTART_COUNT"])
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"GLOO rank={rank} world={world} restart={restart} sum={t.item():g} "
      f"master={env['MASTER_ADDR']}:{env['MASTER_PORT']}", flush=True)
if mode == "sleep_once" and restart == 0:
    time.sleep(60)
elif mode.startswith("steps:") or (mode.startswith("steps_once:") and restart == 0):
    for step in range(int(mode.split(":")[1])):
        t = torch.tensor([1.0])
        dist.all_reduce(t)
        assert t.item() == world, t
        time.sleep(0.1)
    print(f"GLOO done rank={rank}", flush=True)
elif mode.startswith("until:"):
    while not os.path.exists(mode.split(":", 1)[1]):
        time.sleep(0.1)
dist.barrier()
dist.destroy_process_group()
