# SPDX-License-Identifier: MIT
"""The worker of PyTorch's test_run.test_init_method_tcp_with_torchelastic (issue 35, item 14), as
PyTorch's bin/test_script_torchelastic_init_method.py does it: gloo through --init-method, one
all_reduce, and no destroy_process_group(), so that the group is torn down by the interpreter's
exit with every peer doing the same at once."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--init-method", "--init_method", required=True)
args = parser.parse_args()
rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group(backend=dist.Backend.GLOO, init_method=args.init_method, rank=rank,
                        world_size=world_size)
t = F.one_hot(torch.tensor(rank), num_classes=world_size)
dist.all_reduce(t)
if torch.sum(t).item() != world_size:
    raise RuntimeError(f"wrong world size: {torch.sum(t).item()} != {world_size}")
print("Done")
