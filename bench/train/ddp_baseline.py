#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Python DDP baseline the C++ worker is measured against: the same CNN, data, batch,
optimizer and backend (gloo), written the way the seed article does it (SyncBatchNorm is
skipped on CPU because PyTorch's needs CUDA; plain BatchNorm + DDP, as in build-notes.md).

Run under a launcher:  ddprun --nproc_per_node=2 /usr/bin/python3 bench/train/ddp_baseline.py
or alone for the one-process figure. Prints one line per epoch and, with --summary-json, the
same metrics the C++ worker writes."""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def load(data_dir, split):
    with gzip.open(f"{data_dir}/{split}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{data_dir}/{split}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    return TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--summary-json", default="")
    p.add_argument("--channels-last", action="store_true",
                   help="NHWC weights and inputs (what the C++ worker uses by default)")
    args = p.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    torch.manual_seed(args.seed)
    train_set, test_set = load(args.data, "train"), load(args.data, "t10k")
    model = make_model()
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    sampler = DistributedSampler(train_set, world, rank, seed=args.seed) if distributed else None
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler,
                        shuffle=sampler is None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    train_seconds, train_cpu_seconds, train_samples, accuracy = 0.0, 0.0, 0, 0.0
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        start, cpu_start, samples = time.perf_counter(), time.process_time(), 0
        for step, (x, y) in enumerate(loader):
            if args.max_steps and step >= args.max_steps:
                break
            opt.zero_grad()
            F.cross_entropy(model(x.contiguous(memory_format=fmt)), y).backward()
            opt.step()
            samples += len(x) * world
        seconds = time.perf_counter() - start
        train_seconds += seconds
        train_cpu_seconds += time.process_time() - cpu_start
        train_samples += samples
        model.eval()
        with torch.no_grad():
            n = len(test_set)
            lo, hi = n * rank // world, n * (rank + 1) // world
            x, y = test_set.tensors[0][lo:hi], test_set.tensors[1][lo:hi]
            counts = torch.tensor([float((model(x.contiguous(memory_format=fmt)).argmax(1) == y).sum()),
                                   float(hi - lo)],
                                  dtype=torch.float64)
            if distributed:
                dist.all_reduce(counts)
            accuracy = float(counts[0] / counts[1])
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: {seconds:.1f} s, {samples / seconds:.0f} samples/s, "
                  f"test accuracy {100 * accuracy:.2f}%", flush=True)
    if rank == 0 and args.summary_json:
        with open(args.summary_json, "w") as f:
            json.dump({"world_size": world, "threads": torch.get_num_threads(),
                       "train_samples": train_samples, "train_seconds": train_seconds,
                       "samples_per_second": train_samples / train_seconds,
                       "cpu_ms_per_1k_samples_per_rank": 1e6 * train_cpu_seconds / (train_samples / world),
                       "test_accuracy": accuracy}, f, indent=2)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
