# SPDX-License-Identifier: MIT
"""A gloo job of N steps, one all_reduce each, for the hang tests (torch 1.13 and 2.x).
Options: --steps N, --step-seconds T (sleep per step), --log (print each step),
--heartbeat (send "step N" to DDPRUN_HEARTBEAT_SOCKET), --hang-rank R --hang-step S (rank R sleeps
forever at step S, inside the epoch, while the others wait in all_reduce), --pid-dir D (each rank
writes its pid there), --stop-file F (every rank stops after the step in which any rank saw F; the
flag travels in the all_reduce, so they stop together), --fail-rank R --fail-step S
--fail-message M [--fail-file F] (in the first attempt, rank R raises ValueError(M) at step S,
or at the first step from S on at which F exists, under torch's @record: the error file holds the
message and the traceback)."""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=10)
p.add_argument("--step-seconds", type=float, default=0.0)
p.add_argument("--log", action="store_true")
p.add_argument("--heartbeat", action="store_true")
p.add_argument("--hang-rank", type=int, default=-1)
p.add_argument("--hang-step", type=int, default=3)
p.add_argument("--pid-dir", default="")
p.add_argument("--stop-file", default="")
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--fail-step", type=int, default=5)
p.add_argument("--fail-message", default="bad batch")
p.add_argument("--fail-file", default="")
args = p.parse_args()

rank = int(os.environ["RANK"])
if args.pid_dir:
    with open(os.path.join(args.pid_dir, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
dist.init_process_group("gloo")
heartbeat = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
# Non-blocking, as docs/health.md advises: the agent's queue holds ~10 datagrams, and a blocking
# sendto would freeze this rank (and, through gloo, every rank) while the agent is paused.
heartbeat.setblocking(False)
heartbeat_path = os.environ["DDPRUN_HEARTBEAT_SOCKET"]


def sleep_forever_inside_epoch():
    while True:
        time.sleep(3600)


def train_one_epoch():
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    for step in range(1, args.steps + 1):
        if rank == args.hang_rank and step == args.hang_step:
            sleep_forever_inside_epoch()
        if (rank == args.fail_rank and first_attempt and step >= args.fail_step
                and (os.path.exists(args.fail_file) if args.fail_file else step == args.fail_step)):
            raise ValueError(args.fail_message)
        t = torch.ones(4) * rank
        t[3] = 1.0 if args.stop_file and os.path.exists(args.stop_file) else 0.0
        dist.all_reduce(t)
        if args.step_seconds:
            time.sleep(args.step_seconds)
        if args.log:
            print(f"step {step} sum {t[0].item()}", flush=True)
        if args.heartbeat:
            try:
                heartbeat.sendto(f"step {step}".encode(), heartbeat_path)
            except BlockingIOError:
                pass  # the agent's queue is full: this step's beat is dropped, the next one counts
        if t[3].item() > 0:
            break


@record
def main():
    train_one_epoch()
    dist.barrier()
    dist.destroy_process_group()
    print("done", flush=True)


main()
