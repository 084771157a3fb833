#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""--preload (docs/warm-start.md) against ddprun without it and torchrun 2.x, in one run, with
torch 2.x (python3 on PATH) and gloo. Prints a Markdown table.

  bench/launcher/preload_bench.py [--build build] [--runs 3] [--failures abrupt,exit,exception]
                                  [--restart-only] [--baseline OTHER_DDPRUN]

1. restart: rank 1 fails at step 5 (2 ranks, --max-restarts 1); time from its failure to every
   rank's first all-reduce of the next attempt, once per failure kind: `abrupt` (os._exit(1), as a
   SIGKILL), `exit` (sys.exit(3)) and `exception` (an uncaught exception); the last two run the
   interpreter's exit with the gloo group alive. The floor is the next attempt's own
   init_process_group + first all-reduce, measured inside the workers; "exit path" is the failing
   rank's time from its failure to the end of its atexit handlers (the part a launcher must never
   cut short). A launcher that did not restart in a run is counted, not timed.
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


def launchers(build, baseline=None):
    ddprun = os.path.join(build, "bin", "ddprun")
    if not os.path.exists(ddprun):
        ddprun = os.path.join(build, "launcher", "ddprun")
    out = [("ddprun --preload torch", [ddprun, "--preload", "torch"])]
    if baseline:  # another ddprun binary (an earlier commit's), side by side in the same run
        out.append((f"ddprun --preload torch ({os.path.basename(baseline)})",
                    [baseline, "--preload", "torch"]))
    return out + [("ddprun", [ddprun]),
                  ("torchrun 2.x", [sys.executable, "-m", "torch.distributed.run"])]


def run_once(prefix, nproc, mode, extra=(), fail="abrupt", check=True):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, BENCH_DIR=tmp, BENCH_MODE=mode, BENCH_FAIL=fail,
                   OMP_NUM_THREADS="1")
        flags = [f"--nproc_per_node={nproc}"] + list(extra)
        if "torch.distributed.run" in prefix:
            flags += ["--standalone", "--monitor_interval=0.1"]
        cmd = prefix + flags + [WORKER]
        start = time.time()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0 and check:
            raise RuntimeError(f"{' '.join(cmd)}: rc {proc.returncode}\n{proc.stderr[-2000:]}")
        records = [json.load(open(p)) for p in glob.glob(os.path.join(tmp, "*.json"))]
        return start, records


def restart(prefix, fail):
    """(failure -> every first all-reduce, floor, exit path), or None when it did not restart."""
    _, records = run_once(prefix, 2, "restart", ["--max_restarts=1"], fail, check=False)
    failing = next((r for r in records if "failed" in r), None)
    second = [r for r in records if r["attempt"] == 1]
    if failing is None or len(second) != 2:
        return None
    exit_path = failing.get("exited", failing["failed"]) - failing["failed"]
    return (max(r["first"] for r in second) - failing["failed"],
            max(r["first"] - r["imported"] for r in second), exit_path)


def first_start(prefix):
    start, records = run_once(prefix, 8, "start")
    assert len(records) == 8, records
    return max(r["first"] for r in records) - start


def pss(prefix):
    _, records = run_once(prefix, 4, "pss")
    return statistics.median(r["pss_kb"] for r in records), statistics.median(
        r["rss_kb"] for r in records)


def restart_cell(runs, base=None):
    timed = [r for r in runs if r is not None]
    if not timed:
        return f"did not restart (0 of {len(runs)})", None
    median = statistics.median(r[0] for r in timed)
    text = f"{median:.2f} s"
    if base:
        text += f" ({median / base:.1f}x --preload)"
    text += (f" [floor {statistics.median(r[1] for r in timed):.2f} s, exit path "
             f"{statistics.median(r[2] for r in timed):.2f} s]")
    if len(timed) < len(runs):
        text += f" (restarted {len(timed)} of {len(runs)})"
    return text, median


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--failures", default="abrupt,exit,exception")
    parser.add_argument("--restart-only", action="store_true")
    parser.add_argument("--baseline", help="another ddprun binary to run with --preload torch "
                        "beside this build's (e.g. the commit before a change)")
    args = parser.parse_args()
    failures = args.failures.split(",")
    all_launchers = launchers(args.build, args.baseline)
    restarts = {name: {f: [] for f in failures} for name, _ in all_launchers}
    others = {}
    # Side by side: every launcher and failure kind once per round, so that the load of a shared
    # machine falls on all of them alike.
    for _ in range(args.runs):
        for fail in failures:
            for name, prefix in all_launchers:
                restarts[name][fail].append(restart(prefix, fail))
                print(f"{name} {fail}: {restarts[name][fail][-1]}", file=sys.stderr, flush=True)
    if not args.restart_only:
        for name, prefix in all_launchers:
            fs = [first_start(prefix) for _ in range(args.runs)]
            mem = pss(prefix) if "torchrun" not in name else None
            others[name] = (statistics.median(fs), mem)
            print(f"{name}: {others[name]}", file=sys.stderr, flush=True)
    version = subprocess.run([sys.executable, "-c", "import torch;print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    print(f"{args.runs} runs each (medians); {os.cpu_count()} CPUs; torch {version}\n")
    print("| launcher | " + " | ".join(f"restart after `{f}`: failure -> every rank's first "
                                        "all-reduce" for f in failures) +
          ("" if args.restart_only else " | first start, 8 ranks -> every first all-reduce | "
           "PSS per worker (RSS)") + " |")
    print("|---|" + "---|" * (len(failures) + (0 if args.restart_only else 2)))
    base = {f: restart_cell(restarts["ddprun --preload torch"][f])[1] for f in failures}
    for name, _ in all_launchers:
        first = name == "ddprun --preload torch"
        cells = [restart_cell(restarts[name][f], None if first else base[f])[0] for f in failures]
        if not args.restart_only:
            f, mem = others[name]
            fbase = others["ddprun --preload torch"][0]
            cells.append(f"{f:.2f} s" + ("" if first else f" ({f / fbase:.1f}x --preload)"))
            cells.append(f"{mem[0] / 1024:.0f} MiB ({mem[1] / 1024:.0f} MiB)" if mem else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
