#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""--preload (docs/warm-start.md) against ddprun without it and torchrun 2.x, in one run, with
torch 2.x (python3 on PATH) and gloo. Prints a Markdown table.

  bench/launcher/preload_bench.py [--build build] [--runs 3]

1. restart: rank 1 fails at step 5 (2 ranks, --max-restarts 1); time from its failure to every
   rank's first all-reduce of the next attempt. The floor is the next attempt's own
   init_process_group + first all-reduce, measured inside the workers.
2. first start, 8 ranks: from the launcher's start to every rank's first all-reduce.
3. memory: PSS per worker (/proc/self/smaps_rollup, 4 ranks after their first all-reduce),
   forked vs exec'd.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "preload_worker.py")


def launchers(build):
    ddprun = os.path.join(build, "bin", "ddprun")
    if not os.path.exists(ddprun):
        ddprun = os.path.join(build, "launcher", "ddprun")
    return [("ddprun --preload torch", [ddprun, "--preload", "torch"]),
            ("ddprun", [ddprun]),
            ("torchrun 2.x", [sys.executable, "-m", "torch.distributed.run"])]


def run_once(prefix, nproc, mode, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, BENCH_DIR=tmp, BENCH_MODE=mode, OMP_NUM_THREADS="1")
        flags = [f"--nproc_per_node={nproc}"] + list(extra)
        if "torch.distributed.run" in prefix:
            flags += ["--standalone", "--monitor_interval=0.1"]
        cmd = prefix + flags + [WORKER]
        start = time.time()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: rc {proc.returncode}\n{proc.stderr[-2000:]}")
        records = [json.load(open(p)) for p in glob.glob(os.path.join(tmp, "*.json"))]
        return start, records


def restart(prefix):
    _, records = run_once(prefix, 2, "restart", ["--max_restarts=1"])
    failed = next(r["failed"] for r in records if "failed" in r)
    second = [r for r in records if r["attempt"] == 1]
    assert len(second) == 2, records
    return (max(r["first"] for r in second) - failed,
            max(r["first"] - r["imported"] for r in second))


def first_start(prefix):
    start, records = run_once(prefix, 8, "start")
    assert len(records) == 8, records
    return max(r["first"] for r in records) - start


def pss(prefix):
    _, records = run_once(prefix, 4, "pss")
    return statistics.median(r["pss_kb"] for r in records), statistics.median(
        r["rss_kb"] for r in records)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    all_launchers = launchers(args.build)
    results = {}
    for name, prefix in all_launchers:
        rs = [restart(prefix) for _ in range(args.runs)]
        fs = [first_start(prefix) for _ in range(args.runs)]
        mem = pss(prefix) if "torchrun" not in name else None
        results[name] = (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs),
                         statistics.median(fs), mem)
        print(f"{name}: {results[name]}", file=sys.stderr, flush=True)
    base = results["ddprun --preload torch"]
    print(f"{args.runs} runs each (medians); {os.cpu_count()} CPUs; "
          f"{subprocess.run([sys.executable, '-c', 'import torch;print(torch.__version__)'], capture_output=True, text=True).stdout.strip()}\n")
    print("| launcher | restart: failure -> every rank's first all-reduce | of which init + first "
          "all-reduce (floor) | first start, 8 ranks -> every first all-reduce | PSS per worker "
          "(RSS) |")
    print("|---|---|---|---|---|")
    for name, (r, floor, f, mem) in results.items():
        ratio = "" if name == "ddprun --preload torch" else (
            f" ({r / base[0]:.1f}x --preload)")
        fratio = "" if name == "ddprun --preload torch" else f" ({f / base[2]:.1f}x --preload)"
        m = f"{mem[0] / 1024:.0f} MiB ({mem[1] / 1024:.0f} MiB)" if mem else "-"
        print(f"| {name} | {r:.2f} s{ratio} | {floor:.2f} s | {f:.2f} s{fratio} | {m} |")


if __name__ == "__main__":
    main()
