#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compares ddp::worker::DistributedSampler (through sampler_dump) with PyTorch's
torch.utils.data.distributed.DistributedSampler for shuffle on/off, drop_last on/off, sizes
divisible by the replica count and not, several seeds and epochs.
Usage: sampler_parity.py path/to/sampler_dump [--loader]   (run with the Python whose torch matches)
--loader: the indices come from torch::data::make_data_loader driving the sampler."""
import json
import subprocess
import sys

import torch
from torch.utils.data.distributed import DistributedSampler

CONFIGS = [  # size, replicas, shuffle, drop_last, seed, epochs
    (12, 3, 1, 0, 0, 3), (12, 3, 1, 1, 0, 2), (10, 3, 1, 0, 0, 3), (10, 3, 1, 1, 5, 3),
    (10, 3, 0, 0, 0, 2), (10, 3, 0, 1, 0, 2), (7, 4, 1, 0, 42, 2), (2, 5, 1, 0, 1, 2),
    (2, 5, 1, 1, 1, 1), (1000, 2, 1, 0, 0, 3), (1001, 2, 1, 0, 3, 3), (1001, 2, 1, 1, 3, 2),
    (60000, 2, 1, 0, 0, 2), (9999, 7, 1, 0, 123, 2), (9999, 7, 0, 1, 0, 1), (0, 2, 1, 0, 0, 1),
]


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def main():
    args = [",".join(map(str, c)) for c in CONFIGS]
    mode = sys.argv[2:3]
    ours = json.loads(subprocess.run([sys.argv[1], *mode, *args], check=True, capture_output=True,
                                     text=True, timeout=120).stdout)
    checked, failures = 0, 0
    for row in ours:
        size, replicas, shuffle, drop_last, seed, _ = map(int, row["config"].split(","))
        sampler = DistributedSampler(Sized(size), num_replicas=replicas, rank=row["rank"],
                                     shuffle=bool(shuffle), seed=seed, drop_last=bool(drop_last))
        sampler.set_epoch(row["epoch"])
        expected = list(iter(sampler))
        checked += 1
        if expected != row["indices"] or sampler.num_samples != row["num_samples"]:
            failures += 1
            print(f"MISMATCH {row['config']} rank {row['rank']} epoch {row['epoch']}: "
                  f"torch {expected[:12]} (n={sampler.num_samples}) vs ours {row['indices'][:12]} "
                  f"(n={row['num_samples']})")
    how = "through make_data_loader" if mode else "indices()"
    print(f"sampler parity ({how}) with torch {torch.__version__}: {checked - failures}/{checked} match")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
