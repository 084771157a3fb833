# SPDX-License-Identifier: MIT
"""Joins a gloo process group through --init-method (tcp://... or env://) and checks an all_reduce."""
import argparse
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--init-method", required=True)
args = parser.parse_args()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", init_method=args.init_method, rank=rank, world_size=world)
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2, t
dist.barrier()
dist.destroy_process_group()
