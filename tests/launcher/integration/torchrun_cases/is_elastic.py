# SPDX-License-Identifier: MIT
"""Writes torch.distributed.is_torchelastic_launched() to --out-file."""
import argparse

import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--out-file", required=True)
args = parser.parse_args()
with open(args.out_file, "w") as f:
    f.write(str(dist.is_torchelastic_launched()))
