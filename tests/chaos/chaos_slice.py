#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""CTest `chaos.slice`: a short seeded run of the chaos harness (bench/chaos/run_chaos.py) plus a
replay of every schedule under tests/chaos/schedules/ (each a violation found once, with the exit
codes it must now end with), on a 3-node elastic c10d job with warm starts (--preload) and short
timeouts, so that about 30 faults fit in a few minutes on 2 cores. docs/reliability.md says what
is checked.

  chaos_slice.py [--ddprun PATH] [--seed S] [--faults N] [--schedules DIR]   (or DDPRUN=PATH)

Exit 0: no violation; 1: a violation (the harness printed it, with its seed, fault index and
evidence, and kept the run's files); 77: skipped (no torch, no `ip`, no ddprun), with the reason."""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHAOS = os.path.join(ROOT, "bench", "chaos")
sys.path.insert(0, CHAOS)
import report  # noqa: E402

# The seeded part: 3 node slots (3 agents at first: a late node only after a loss), a 8 s hang
# timeout (a hang costs 8 s + a restart, not 20), the harness's 2 s heartbeat timeout.
SLICE_ARGS = ["--mode", "c10d", "--nodes", "3", "--hang-timeout", "8"]


def skip(why):
    print(f"chaos.slice: SKIP: {why}", flush=True)
    return 77


def run(ddprun, extra, out_json):
    cmd = [sys.executable, os.path.join(CHAOS, "run_chaos.py"), "--ddprun", ddprun,
           "--json", out_json, *extra]
    print("chaos.slice: $ " + " ".join(cmd[1:]), flush=True)
    return subprocess.run(cmd).returncode


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ddprun", default=os.environ.get("DDPRUN"))
    p.add_argument("--seed", type=int, default=26)
    p.add_argument("--faults", type=int, default=14, help="of the seeded run (0: replays only)")
    p.add_argument("--schedules", default=os.path.join(HERE, "schedules"),
                   help="the replay files' directory")
    args = p.parse_args()
    if not args.ddprun or not os.access(args.ddprun, os.X_OK):
        return skip(f"no ddprun binary ({args.ddprun!r}; set DDPRUN or --ddprun)")
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode:
        return skip(f"{sys.executable} cannot import torch")
    if not shutil.which("ip"):
        return skip("no `ip` (iproute2): the job's nodes are network namespaces")
    start = time.monotonic()
    summaries, failed, skipped = [], [], []
    with tempfile.TemporaryDirectory(prefix="chaos_slice_") as tmp:
        runs = [(os.path.basename(f), ["--replay", f])
                for f in sorted(glob.glob(os.path.join(args.schedules, "*.json")))]
        if args.faults > 0:
            runs.append((f"seed {args.seed}", ["--seed", str(args.seed), "--faults",
                                               str(args.faults), *SLICE_ARGS]))
        for k, (name, extra) in enumerate(runs):
            out = os.path.join(tmp, f"{k}.json")
            rc = run(args.ddprun, extra, out)
            if rc == 77:
                skipped.append(name)
                continue
            if os.path.exists(out):
                with open(out) as f:
                    summaries.append(json.load(f))
            if rc != 0:
                failed.append(f"{name} (exit {rc})")
    total = report.merge(summaries) if summaries else None
    print(f"\nchaos.slice: {len(summaries)} runs in {time.monotonic() - start:.0f} s"
          + (f"; skipped: {', '.join(skipped)}" if skipped else ""))
    if total:
        print(report.markdown(total))
        print("exit codes:", ", ".join(f"{c}: {n}" for c, n in sorted(total["exit_codes"].items())))
    if failed:
        print(f"chaos.slice: FAILED: {'; '.join(failed)}", file=sys.stderr)
        return 1
    if not summaries:
        return skip(f"every run was skipped ({', '.join(skipped)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
