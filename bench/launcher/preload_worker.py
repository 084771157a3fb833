# SPDX-License-Identifier: MIT
"""preload_bench.py's worker: times its start, records its first gloo all-reduce and its PSS;
BENCH_MODE=restart makes rank 1 of attempt 0 fail after a few steps, as BENCH_FAIL says: `abrupt`
(os._exit(1), the default), `exit` (sys.exit(3)) or `exception` (an uncaught RuntimeError). The
last two run the interpreter's whole exit path with the gloo group still alive (no
destroy_process_group), as most failing scripts do; `exited` in the record is the last moment of
that exit path that Python code can see (an atexit handler registered first, so run last)."""
import atexit
import json
import os
import sys
import time

begin = time.time()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

imported = time.time()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
# Keys under this attempt's prefix: torch 2.x keys gloo's addresses by process group only, and
# torchrun 2.x does not clear the last attempt's (ddprun does), so attempt 1 would read stale ones.
store = dist.PrefixStore(f"bench_attempt_{attempt}", dist.TCPStore(
    os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False))
dist.init_process_group("gloo", store=store, rank=int(os.environ["RANK"]),
                        world_size=int(os.environ["WORLD_SIZE"]))
x = torch.ones(1)
dist.all_reduce(x)
first = time.time()
rank = dist.get_rank()
mode = os.environ.get("BENCH_MODE", "start")
record = {"rank": rank, "attempt": attempt, "begin": begin, "imported": imported, "first": first}
if mode == "pss":
    dist.barrier()  # every worker is up and has done the same work
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Pss:", "Rss:")):
                record[line.split(":")[0].lower() + "_kb"] = int(line.split()[1])
    dist.barrier()
if mode == "restart" and attempt == 0:
    for _ in range(5):
        dist.all_reduce(x)
    if rank == 1:
        how = os.environ.get("BENCH_FAIL", "abrupt")
        path = os.path.join(os.environ["BENCH_DIR"], f"{rank}.{attempt}.json")

        def exited():  # registered first among ours: runs last of the script's atexit handlers
            record["exited"] = time.time()
            with open(path, "w") as f:
                json.dump(record, f)

        atexit.register(exited)
        record["failed"] = time.time()
        with open(path, "w") as f:
            json.dump(record, f)
        if how == "exit":
            sys.exit(3)
        if how == "exception":
            raise RuntimeError("rank 1 fails (preload_bench)")
        os._exit(1)
    while True:  # the others wait to be stopped, as a training loop would block
        time.sleep(0.01)
with open(os.path.join(os.environ["BENCH_DIR"], f"{rank}.{attempt}.json"), "w") as f:
    json.dump(record, f)
dist.destroy_process_group()
