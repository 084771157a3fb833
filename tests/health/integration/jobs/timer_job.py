# SPDX-License-Identifier: MIT
"""torch.distributed.elastic.timer: rank 1 holds expires(after=1) around a 5 s sleep."""
import os, sys, time
import torch.distributed.elastic.timer as timer
from torch.distributed.elastic.timer import FileTimerClient
rank = int(os.environ["RANK"])
if os.environ.get("PID_DIR"):
    with open(os.path.join(os.environ["PID_DIR"], f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
timer.configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
print(f"rank {rank} pid {os.getpid()} timer file {os.environ['TORCHELASTIC_TIMER_FILE']}", flush=True)
if rank == 1:
    with timer.expires(after=1, scope="slow_section"):
        time.sleep(5)
    print("rank 1 survived the timer", flush=True)
else:
    with timer.expires(after=30, scope="fast_section"):
        time.sleep(0.2)
    time.sleep(8)
print(f"rank {rank} done", flush=True)
