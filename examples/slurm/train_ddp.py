"""A small DDP training script for the Slurm and Kubernetes examples (works on torch 1.13 and 2.x).

Run it under ddprun (or torchrun); it reads RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT
from the environment like any `init_process_group("env://")` program. It trains a tiny MLP on
synthetic data, checks that all ranks hold the same weights at the end, and on SIGUSR1 (Slurm's
pre-timeout warning, forwarded by ddprun) writes a checkpoint and keeps going.
"""
import argparse
import os
import signal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--checkpoint", default="ddp-example.pt")
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    checkpoint_requested = []
    signal.signal(signal.SIGUSR1, lambda *_: checkpoint_requested.append(True))

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device),
                device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own data shard
    for step in range(args.steps):
        x = torch.randn(64, 32, generator=generator).to(device)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if checkpoint_requested:
            checkpoint_requested.clear()
            if rank == 0:
                torch.save(model.module.state_dict(), args.checkpoint)
                print(f"step {step}: SIGUSR1 received, checkpoint written to {args.checkpoint}", flush=True)
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)

    # DDP keeps replicas identical: compare a weight checksum across ranks.
    checksum = torch.tensor([sum(p.detach().double().sum().item() for p in model.parameters())], device=device)
    gathered = [torch.zeros_like(checksum) for _ in range(world)]
    dist.all_gather(gathered, checksum)
    if rank == 0:
        same = all(torch.allclose(g, gathered[0]) for g in gathered)
        print(f"{world} ranks, final loss {loss.item():.4f}, replicas identical: {same}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
