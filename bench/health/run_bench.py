#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Health benchmarks (docs/health.md). Usage: run_bench.py BUILD_DIR [ROUNDS]
1. Heartbeat handling: 8 workers blast N "step i" datagrams each at a ddprun with every health
   feature on; datagrams per second of ddprun's own CPU time (utime+stime from /proc, with the
   same run at N=0 subtracted) = what one core sustains.
2. Hang verdict latency, 8 Python ranks: from the moment the timeout is reached to the verdict,
   to every stack saved (8 concurrent py-spy dumps), to ddprun's exit; from --events times.
3. Peak RSS (VmHWM) of the ddprun process with 8 workers and every health feature on."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
DDPRUN = os.path.join(BUILD, "bin", "ddprun")
BLASTER = os.path.join(BUILD, "bin", "heartbeat_blaster")
HEALTH_ON = ["--hang-timeout", "60", "--status-port", "0", "--file-timer"]
TICKS = os.sysconf("SC_CLK_TCK")


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    e["OMP_NUM_THREADS"] = "1"
    return e


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def run_blast(per_worker):
    """ddprun's CPU seconds once all 8 workers have sent `per_worker` datagrams."""
    p = subprocess.Popen([DDPRUN, "--nproc-per-node", "8", "--no-python"] + HEALTH_ON +
                         [BLASTER, str(per_worker), "1.5"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env(), text=True)
    sent = 0
    t0 = time.monotonic()
    for line in p.stdout:
        if "sent" in line:
            sent += 1
            if sent == 8:
                cpu = cpu_seconds(p.pid)
                wall = time.monotonic() - t0
                break
    p.stdout.read()
    assert p.wait() == 0
    return cpu, wall


def bench_heartbeats():
    n = 200_000
    print("\n### 1. Heartbeat datagrams handled per second of ddprun CPU (8 senders, all health on)\n")
    print("| round | datagrams | ddprun CPU s (minus idle run) | datagrams / CPU-second | wall s |")
    print("|---|---|---|---|---|")
    rates = []
    for r in range(ROUNDS):
        idle, _ = run_blast(0)
        busy, wall = run_blast(n)
        cpu = max(busy - idle, 1.0 / TICKS)
        rates.append(8 * n / cpu)
        print(f"| {r + 1} | {8 * n} | {cpu:.2f} | {8 * n / cpu:,.0f} | {wall:.2f} |")
    print(f"\nmedian: {statistics.median(rates):,.0f} datagrams per CPU-second (target >= 100,000)")


def bench_hang_latency():
    print("\n### 2. Hang verdict latency, 8 Python ranks, --hang-timeout 2\n")
    print("| round | verdict after timeout (ms) | stacks saved (ms) | verdict to exit (ms) | exit |")
    print("|---|---|---|---|---|")
    rows = []
    for r in range(ROUNDS):
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "stuck.py")
            with open(script, "w") as f:
                f.write("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
            events = os.path.join(tmp, "events.jsonl")
            rc = subprocess.run([DDPRUN, "--nproc-per-node", "8", "--hang-timeout", "2", "--events",
                                 events, "--log-dir", os.path.join(tmp, "logs"), script],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env()).returncode
            ev = [json.loads(l) for l in open(events)]
            hang = [e for e in ev if e["event"] == "hang"][0]
            saved = [e for e in ev if e["event"] == "stacks_saved"][0]
            summary = [e for e in ev if e["event"] == "summary"][0]
            late = (hang["idle_s"] - 2.0) * 1000
            dump = (saved["time"] - hang["time"]) * 1000
            to_exit = (summary["time"] - hang["time"]) * 1000
            rows.append((late, dump, to_exit))
            print(f"| {r + 1} | {late:.1f} | {dump:.0f} | {to_exit:.0f} | {rc} |")
    print(f"\nmedian: verdict {statistics.median(x[0] for x in rows):.1f} ms after the timeout, stacks "
          f"{statistics.median(x[1] for x in rows):.0f} ms, exit {statistics.median(x[2] for x in rows):.0f} ms "
          "after the verdict")


def bench_rss():
    print("\n### 3. Peak RSS of ddprun, 8 workers, every health feature on, 20k heartbeats each\n")
    hwms = []
    for _ in range(ROUNDS):
        p = subprocess.Popen([DDPRUN, "--nproc-per-node", "8", "--no-python"] + HEALTH_ON +
                             [BLASTER, "20000", "0.5"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=env())
        hwm = 0
        while p.poll() is None:
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            hwm = max(hwm, int(line.split()[1]))
            except (FileNotFoundError, ProcessLookupError):
                pass
            time.sleep(0.02)
        hwms.append(hwm)
    print(f"peak RSS (VmHWM): median {statistics.median(hwms) / 1024:.1f} MB, max {max(hwms) / 1024:.1f} MB "
          "(target <= 10 MB)")


if __name__ == "__main__":
    bench_heartbeats()
    bench_hang_latency()
    bench_rss()
