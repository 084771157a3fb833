# SPDX-License-Identifier: MIT
"""Worker for reform_time.py. Writes "<restart>-<rank>-<pid>" = start time (ns) into $BENCH_OUT
once running, then behaves as the scenario says:
  sleep  attempt 0 sleeps (until stopped); later attempts exit 0
  gloo   joins a gloo group and all_reduces in a loop (attempt 0, until a peer vanishes and the
         collective fails); later attempts join, all_reduce once and exit 0"""
import os
import sys
import time

mode = sys.argv[1]
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank = os.environ["RANK"]


def mark():
    path = os.path.join(os.environ["BENCH_OUT"], f"{restart}-{rank}-{os.getpid()}")
    with open(path, "w") as f:
        f.write(str(time.time_ns()))


if mode == "sleep":
    mark()
    if restart == 0:
        time.sleep(120)
    sys.exit(0)

import datetime  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
mark()
t = torch.ones(1)
if restart == 0:
    while True:
        dist.all_reduce(t)
        time.sleep(0.02)
dist.all_reduce(t)
dist.destroy_process_group()
