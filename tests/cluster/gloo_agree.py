"""Worker for the cluster end-to-end tests (run by ddprun with Debian's /usr/bin/python3, torch 1.13).

Joins the gloo process group from the env:// variables ddprun sets, all-reduces rank+1 and
all-gathers every rank's node name, and writes OUT/rank-<RANK>.json. Options:
  --fail-rank R --exit-code C   rank R exits with C after joining (the others then block in a
                                collective until ddprun stops them)
  --wait-stop                   after the collectives, write OUT/ready-<RANK>, count SIGUSR1 into
                                OUT/usr1-<RANK>, and exit 0 once OUT/stop exists (at most 120 s)
"""
import argparse
import json
import os
import signal
import socket
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--exit-code", type=int, default=7)
    parser.add_argument("--wait-stop", action="store_true")
    args = parser.parse_args()

    usr1 = []
    signal.signal(signal.SIGUSR1, lambda *_: usr1.append(time.time()))

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if rank == args.fail_rank:
        print(f"rank {rank} failing with exit code {args.exit_code}", flush=True)
        os._exit(args.exit_code)

    total = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(total)
    nodes = [None] * world
    dist.all_gather_object(nodes, node)
    result = {
        "rank": rank, "world_size": world, "sum": int(total.item()), "nodes": nodes,
        "local_rank": int(os.environ["LOCAL_RANK"]), "group_rank": int(os.environ.get("GROUP_RANK", -1)),
        "master_addr": os.environ["MASTER_ADDR"], "master_port": int(os.environ["MASTER_PORT"]),
        "node": node,
    }
    with open(os.path.join(args.out, f"rank-{rank}.json"), "w") as f:
        json.dump(result, f)

    if args.wait_stop:
        open(os.path.join(args.out, f"ready-{rank}"), "w").close()
        deadline = time.time() + 120
        while not os.path.exists(os.path.join(args.out, "stop")) and time.time() < deadline:
            if usr1:
                with open(os.path.join(args.out, f"usr1-{rank}"), "w") as f:
                    f.write(str(len(usr1)))
            time.sleep(0.05)
        if usr1:
            with open(os.path.join(args.out, f"usr1-{rank}"), "w") as f:
                f.write(str(len(usr1)))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
