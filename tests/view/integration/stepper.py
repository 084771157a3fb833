# SPDX-License-Identifier: MIT
"""Worker for the dashboard/top tests: reports a step on ddprun's heartbeat socket every 0.1 s
(the rank named by SLOW_RANK every 1 s) until the file STOP_FILE exists (at most 120 s), then
exits 0. The rank named by PEER_RANK exits 1 on its own 0.5 s after the rank that wrote its pid in the
file FAIL_MARK has exited (as a collective fails when its peer died). The ranks listed in HOG_RANKS ("1,3") hold 200 MiB and keep a core busy half the
time (the views' CPU and memory columns). The rank named by FAIL_ONCE_RANK fails in the first attempt after 10 steps (FAIL_AT_STEP): a line on
stderr, torch's error file (message and traceback from FAIL_MESSAGE), exit 3."""
import json
import sys
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
hog = str(rank) in env.get("HOG_RANKS", "").split(",")
held = b"\x01" * (200 << 20) if hog else b""  # written, so resident


def wait(seconds):
    if not hog:
        return time.sleep(seconds)
    busy_until = time.monotonic() + seconds / 2
    while time.monotonic() < busy_until:
        pass
    time.sleep(seconds / 2)


def peer_gone(mark):
    """The failing rank has exited, and as long ago as a collective takes to notice (0.5 s): a
    peer that failed on the mark alone could end before it, and win the store's race (CI)."""
    try:
        with open(mark) as f:
            pid = int(f.read() or 0)
    except (OSError, ValueError):
        return False
    if pid and os.path.exists(f"/proc/{pid}"):
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                return False
    global peer_gone_since
    peer_gone_since = peer_gone_since or time.monotonic()
    return time.monotonic() - peer_gone_since >= 0.5


peer_gone_since = None
step = 0
while time.monotonic() < deadline and not os.path.exists(env["STOP_FILE"]):
    step += 1
    if path:
        try:
            sock.sendto(b"step %d" % step, path)
        except OSError:
            pass
    wait(period)
    if (step == int(env.get("FAIL_AT_STEP", 10)) and str(rank) == env.get("FAIL_ONCE_RANK")
            and env.get("TORCHELASTIC_RESTART_COUNT") == "0"):
        message = env.get("FAIL_MESSAGE", "ValueError: bad batch")
        print(f"stepper rank={rank} about to fail at step {step}", file=sys.stderr, flush=True)
        with open(env["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump({"message": {"message": message, "extraInfo": {
                "py_callstack": f"Traceback (most recent call last):\n  File \"stepper.py\", "
                                f"line 1, in <module>\n{message}",
                "timestamp": "0"}}}, f)
        if env.get("FAIL_MARK"):
            with open(env["FAIL_MARK"], "w") as f:
                f.write(str(os.getpid()))
        sys.exit(3)
    if str(rank) == env.get("PEER_RANK") and peer_gone(env.get("FAIL_MARK", "/nonexistent")):
        print(f"RuntimeError: connection closed by peer (rank {rank})", file=sys.stderr, flush=True)
        sys.exit(1)
