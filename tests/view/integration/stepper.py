# SPDX-License-Identifier: MIT
"""Worker for the dashboard/top tests: reports a step on ddprun's heartbeat socket every 0.1 s
(the rank named by SLOW_RANK every 1 s) until the file STOP_FILE exists (at most 120 s), then
exits 0."""
import os
import socket
import time

env = os.environ
rank = int(env["RANK"])
period = 1.0 if str(rank) == env.get("SLOW_RANK") else 0.1
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
path = env.get("DDPRUN_HEARTBEAT_SOCKET")
print(f"stepper rank={rank} world={env['WORLD_SIZE']} restart={env['TORCHELASTIC_RESTART_COUNT']}",
      flush=True)
deadline = time.monotonic() + 120
step = 0
while time.monotonic() < deadline and not os.path.exists(env["STOP_FILE"]):
    step += 1
    if path:
        try:
            sock.sendto(b"step %d" % step, path)
        except OSError:
            pass
    time.sleep(period)
