#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a `--preload torch` restart's time goes (docs/warm-start.md, "An early notice from the
failing worker"): preload_bench.py's restart job (2 ranks, gloo, rank 1 fails at step 5,
--max-restarts 1) under ddprun --events, split by the workers' own records and ddprun's events:

  exit path   failure -> the end of the failing rank's atexit handlers (its record)
  finalize    -> ddprun reaps the failing rank (`worker_exit`): the interpreter's finalization
  stop        -> the other rank reaped (SIGTERM)
  start       -> every worker of the next attempt started (the last `worker_start`)
  floor       -> every rank's first all-reduce of the next attempt

Only `stop` and `start` could overlap with `finalize` if ddprun knew of the failure before the
reap; the failing rank's replacement cannot run before its old process is gone.

  bench/launcher/restart_breakdown.py [--build build] [--runs 3] [--failures exit,exception,abrupt]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "preload_worker.py")
PARTS = ("exit path", "finalize", "stop", "start", "floor", "total")


def one(ddprun, fail):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, BENCH_DIR=tmp, BENCH_MODE="restart", BENCH_FAIL=fail,
                   OMP_NUM_THREADS="1")
        events = os.path.join(tmp, "events.jsonl")
        subprocess.run([ddprun, "--preload", "torch", "--nproc_per_node=2", "--max_restarts=1",
                        "--events", events, WORKER], env=env, capture_output=True, timeout=600)
        ev = [json.loads(line) for line in open(events)]
        rec = {(r["rank"], r["attempt"]): r
               for r in (json.load(open(p)) for p in glob.glob(os.path.join(tmp, "*.json")))}
        if (0, 1) not in rec or (1, 1) not in rec:
            return None
        failed = rec[(1, 0)]["failed"]
        exits = {e["rank"]: e["time"] for e in ev
                 if e["event"] == "worker_exit" and e["attempt"] == 0}
        started = max(e["time"] for e in ev if e["event"] == "worker_start" and e["attempt"] == 1)
        first = max(rec[(r, 1)]["first"] for r in (0, 1))
        marks = [failed, rec[(1, 0)].get("exited", failed), exits[1], max(exits[1], exits[0]),
                 started, first]
        return [b - a for a, b in zip(marks, marks[1:])] + [first - failed]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "build"))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--failures", default="exit,exception,abrupt")
    args = p.parse_args()
    ddprun = os.path.join(args.build, "bin", "ddprun")
    rows = {f: [] for f in args.failures.split(",")}
    for _ in range(args.runs):
        for fail in rows:
            rows[fail].append(one(ddprun, fail))
    print("| failure (medians, s) | " + " | ".join(PARTS) + " |")
    print("|---|" + "---|" * len(PARTS))
    for fail, runs in rows.items():
        runs = [r for r in runs if r]
        cells = [f"{statistics.median(r[i] for r in runs):.3f} ({min(r[i] for r in runs):.2f}-"
                 f"{max(r[i] for r in runs):.2f})" for i in range(len(PARTS))]
        print(f"| `{fail}` ({len(runs)} runs) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
