# SPDX-License-Identifier: MIT
"""A plain torchrun-style DDP script (nothing ddprun-specific): gloo, init_process_group from the
environment, an all_reduce, a DistributedSampler and one DDP training step. Prints one line
'DDP_CHECK {json}' that the test compares across ranks. Works with torch 1.13 and 2.x."""
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")  # env:// from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)

    dataset = TensorDataset(torch.arange(20, dtype=torch.float32).unsqueeze(1))
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=7)
    sampler.set_epoch(1)
    mine = list(sampler)
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.stack([dataset[i][0] for i in mine])
    loss = ((model(x) - 2 * x) ** 2).mean()
    loss.backward()
    opt.step()
    weights = [p.detach().flatten().tolist() for p in model.parameters()]

    print("DDP_CHECK " + json.dumps({
        "rank": rank, "world": world, "local_rank": int(os.environ["LOCAL_RANK"]),
        "allreduce": t.item(), "indices": mine, "all_indices": everyone, "weights": weights,
        "torch": torch.__version__}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
