#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two ddprun builds against each other, interleaved run by run so that a shared machine's load
swings hit both alike. Prints medians; ratios against `cat` for the output path.

  bench/launcher/ab_compare.py OLD_BUILD NEW_BUILD [--runs 100] [--output-runs 3]

Each BUILD is a build directory (bin/ddprun, bin/output_flooder).
"""
import argparse
import os
import statistics
import subprocess
import time


def timed(cmd, env):
    start = time.perf_counter()
    subprocess.run(cmd, shell=True, env=env, check=True)
    return time.perf_counter() - start


def peak_rss_mb(cmd, env):
    proc = subprocess.Popen(cmd, env=env)
    hwm = 0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM"):
                        hwm = max(hwm, int(line.split()[1]))
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    return hwm / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--output-runs", type=int, default=3)
    args = ap.parse_args()
    builds = {"old": os.path.abspath(args.old), "new": os.path.abspath(args.new)}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ddprun = {k: os.path.join(b, "bin", "ddprun") for k, b in builds.items()}
    flooder = os.path.join(builds["new"], "bin", "output_flooder")
    launch = {k: [] for k in builds}
    for _ in range(args.runs):
        for k in builds:
            launch[k].append(timed(f"{ddprun[k]} --nproc_per_node=8 --no_python /bin/true", env))
    per_rank = 134217  # 8 × 134,217 lines of ~100 bytes ≈ 0.1 GB
    gen = f"for r in 0 1 2 3 4 5 6 7; do RANK=$r {flooder} {per_rank} 88 & done; wait"
    output = {k: [] for k in builds}
    cat = []
    for _ in range(args.output_runs):
        cat.append(timed(f"sh -c '{gen}' | cat > /dev/null", env))
        for k in builds:
            output[k].append(timed(f"{ddprun[k]} --nproc_per_node=8 {flooder} {per_rank} 88 | cat > /dev/null", env))
    cat_median = statistics.median(cat)
    print("| build | launch-to-exit, 8 × /bin/true (median) | 0.1 GB output → cat (median) | vs cat | peak RSS, 8 sleeping workers |")
    print("|---|---|---|---|---|")
    for k in builds:
        rss = peak_rss_mb([ddprun[k], "--nproc_per_node=8", "--no_python", "/bin/sleep", "2"], env)
        out = statistics.median(output[k])
        print(f"| {k} | {statistics.median(launch[k]) * 1000:.1f} ms | {out:.3f} s | {out / cat_median:.2f}× | {rss:.1f} MB |")


if __name__ == "__main__":
    main()
