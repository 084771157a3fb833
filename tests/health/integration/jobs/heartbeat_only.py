# SPDX-License-Identifier: MIT
"""No torch: sends "step N" every --every seconds for --steps steps, printing nothing; or, with
--fail-after-step, sends that one step and exits 1 (a restart loop that never progresses)."""
import argparse
import os
import socket
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=5)
p.add_argument("--every", type=float, default=1.0)
p.add_argument("--fail-after-step", type=int, default=-1)
args = p.parse_args()
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
path = os.environ["DDPRUN_HEARTBEAT_SOCKET"]
if args.fail_after_step >= 0:
    s.sendto(f"step {args.fail_after_step}".encode(), path)
    time.sleep(0.2)
    sys.exit(1)
for step in range(1, args.steps + 1):
    time.sleep(args.every)
    s.sendto(f"step {step}".encode(), path)
