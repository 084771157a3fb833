#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Latency of one small Gloo all-reduce (65 floats, a SyncBatchNorm statistics vector), the
cost SyncBatchNorm pays four times per step in the worker. Run under a launcher:
  ddprun --nproc_per_node=2 /usr/bin/python3 bench/train/gloo_latency.py"""
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.zeros(65)
for _ in range(50):
    dist.all_reduce(t)
n = 1000
start, cpu = time.perf_counter(), time.process_time()
for _ in range(n):
    dist.all_reduce(t)
if dist.get_rank() == 0:
    print(f"gloo all-reduce of 65 floats, {dist.get_world_size()} ranks: "
          f"{1e6 * (time.perf_counter() - start) / n:.0f} us wall, "
          f"{1e6 * (time.process_time() - cpu) / n:.0f} us CPU per op")
dist.destroy_process_group()
