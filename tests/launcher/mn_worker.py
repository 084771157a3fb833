# SPDX-License-Identifier: MIT
"""Worker for the multi-node launcher tests: prints what ddprun gave it, then behaves as told.
  ok          exit 0
  sleep       sleep 60 s (until stopped)
  fail:R:C    rank R exits with code C after 0.5 s; the others sleep 60 s
  fail_once   rank 1 exits 3 on attempt 0 only; everyone else (and attempt 1) exits 0
  done:R      rank R exits 0 at once; the others sleep 60 s
  until:PATH  exit 0 once PATH exists (at most 60 s)
  sleep_once  attempt 0 sleeps 60 s (until stopped); later attempts exit 0 (elastic tests), 1.5 s
              late where the file named by DDP_LATE_IF exists by then
  sleep_until:N  attempts below N sleep 60 s (until stopped); later ones exit 0 (elastic tests)
  fail_when:PATH attempt 0: rank 0 exits 3 once PATH exists, the others sleep 60 s; later
              attempts exit 0 (admit=restart)
  fail_here:C where DDP_FAIL_HERE is set: exit C after 0.5 s, every attempt; elsewhere attempts
              0 and 1 sleep 60 s (until stopped) and later ones exit 0 (node_failure_limit)
  fail_or_linger:C where DDP_FAIL_HERE is set: attempt 0 exits C after 0.5 s, later ones exit 0;
              elsewhere a SIGTERM prints `MN TERM` and is ignored until the agent is gone (a node
              whose agent vanishes while it stops its workers)
Every rank also prints whether the rendezvous token reached it (it must not)."""
import os
import signal
import sys
import time

mode = sys.argv[1]
env = os.environ
rank, restart = int(env["RANK"]), int(env["TORCHELASTIC_RESTART_COUNT"])
print(f"MN rank={rank} world={env['WORLD_SIZE']} group={env['GROUP_RANK']}/{env['GROUP_WORLD_SIZE']} "
      f"local={env['LOCAL_RANK']}/{env['LOCAL_WORLD_SIZE']} restart={restart} "
      f"master={env['MASTER_ADDR']}:{env['MASTER_PORT']} agent_store={env['TORCHELASTIC_USE_AGENT_STORE']} "
      f"token_seen={'DDPRUN_RDZV_TOKEN' in env or 'token' in env.get('PET_RDZV_CONF', '')}",
      flush=True)
if mode == "sleep" or (mode == "sleep_once" and restart == 0):
    time.sleep(60)
elif mode == "sleep_once" and os.path.exists(env.get("DDP_LATE_IF", "")):
    time.sleep(1.5)
elif mode.startswith("sleep_until:"):
    if restart < int(mode.split(":")[1]):
        time.sleep(60)
elif mode.startswith("fail_when:"):
    if restart == 0:
        deadline = time.monotonic() + 60
        while rank == 0 and not os.path.exists(mode[len("fail_when:"):]) and time.monotonic() < deadline:
            time.sleep(0.05)
        if rank == 0:
            sys.exit(3)
        time.sleep(60)
elif mode.startswith("fail:"):
    _, target, code = mode.split(":")
    if rank == int(target):
        time.sleep(0.5)
        sys.exit(int(code))
    time.sleep(60)
elif mode.startswith("fail_here:"):
    if "DDP_FAIL_HERE" in env:
        time.sleep(0.5)
        sys.exit(int(mode.split(":")[1]))
    if restart < 2:
        time.sleep(60)
elif mode.startswith("until:"):
    deadline = time.monotonic() + 60
    while not os.path.exists(mode[len("until:"):]) and time.monotonic() < deadline:
        time.sleep(0.05)
elif mode.startswith("done:"):
    if rank != int(mode.split(":")[1]):
        time.sleep(60)
elif mode.startswith("fail_or_linger:"):
    if "DDP_FAIL_HERE" in env:
        if restart == 0:
            time.sleep(0.5)
            sys.exit(int(mode.split(":")[1]))
    else:
        parent = os.getppid()
        signal.signal(signal.SIGTERM, lambda *_: print("MN TERM", flush=True))
        deadline = time.monotonic() + 60
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.05)
elif mode == "fail_once":
    if rank == 1 and restart == 0:
        sys.exit(3)
