#!/usr/bin/env python3
"""SIGUSR1/SIGUSR2 sent to ddprun reach every worker's process group and the job keeps running
(Slurm's pre-timeout warning; torchrun would stop the job). Real processes, no scheduler needed.

Usage: signal_forwarding_test.py DDPRUN
Each of 2 workers (bash) traps USR2 (marker, carries on) and USR1 (marker, exits 0). The test sends
USR2 to ddprun, waits for both USR2 markers and checks ddprun still runs, then sends USR1 and expects
both USR1 markers and ddprun's exit code 0. Everything started is killed in the end, pass or fail."""
import os
import signal
import subprocess
import sys
import tempfile
import time

WORKER = r"""
out="$1"
trap 'echo usr2 > "$out/usr2-$RANK"' USR2
trap 'echo usr1 > "$out/usr1-$RANK"; exit 0' USR1
echo $$ > "$out/ready-$RANK"
for _ in $(seq 600); do sleep 0.1; done   # bounded: 60 s
exit 3
"""


def wait_for(predicate, what, proc, limit_s=30.0):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"ddprun exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def main():
    ddprun = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="ddprun-usr1-") as out:
        worker = os.path.join(out, "worker.sh")
        with open(worker, "w") as f:
            f.write(WORKER)
        proc = subprocess.Popen(
            [ddprun, "--nproc_per_node=2", "--no_python", "--shutdown_timeout=5", "bash", worker, out],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True)
        try:
            files = lambda prefix: all(os.path.exists(f"{out}/{prefix}-{r}") for r in (0, 1))
            wait_for(lambda: files("ready"), "both workers to start", proc)
            proc.send_signal(signal.SIGUSR2)
            wait_for(lambda: files("usr2"), "SIGUSR2 at both workers", proc)
            assert proc.poll() is None, "ddprun stopped after SIGUSR2"
            proc.send_signal(signal.SIGUSR1)
            output, _ = proc.communicate(timeout=30)
            print(output)
            assert files("usr1"), f"SIGUSR1 did not reach both workers: {os.listdir(out)}"
            assert proc.returncode == 0, f"ddprun exit code {proc.returncode}, expected 0"
            assert "forwarded SIGUSR1 to 2 worker(s)" in output, output
            assert "forwarded SIGUSR2 to 2 worker(s)" in output, output
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    print("PASS: SIGUSR1/SIGUSR2 forwarded to both workers; the job kept running and exited 0")


if __name__ == "__main__":
    main()
