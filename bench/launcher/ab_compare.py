#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two ddprun builds against each other, interleaved run by run so that a shared machine's load
swings hit both alike. Prints medians; ratios against `cat` for the output path.

  bench/launcher/ab_compare.py OLD_BUILD NEW_BUILD [--runs 100] [--output-runs 3] [--names old,new]

Each BUILD is a directory with bin/ddprun: a build directory, or an installed tree such as an
unpacked portable tarball (bench/package/portable_vs_debian.sh). The output worker,
bin/output_flooder, comes from the first of the two that has one.
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
    ap.add_argument("--names", default="old,new", help="the two builds' labels in the table")
    args = ap.parse_args()
    names = args.names.split(",")
    if len(names) != 2 or names[0] == names[1]:
        ap.error("--names takes two different labels, comma-separated")
    builds = {names[0]: os.path.abspath(args.old), names[1]: os.path.abspath(args.new)}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ddprun = {k: os.path.join(b, "bin", "ddprun") for k, b in builds.items()}
    flooders = [os.path.join(b, "bin", "output_flooder") for b in builds.values()]
    flooder = next((f for f in flooders if os.access(f, os.X_OK)), None)
    if flooder is None:
        ap.error(f"neither build has bin/output_flooder (ninja output_flooder): {flooders}")
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
    medians = {}
    for k in builds:
        rss = peak_rss_mb([ddprun[k], "--nproc_per_node=8", "--no_python", "/bin/sleep", "2"], env)
        out = statistics.median(output[k])
        medians[k] = (statistics.median(launch[k]), out, rss)
        print(f"| {k} | {medians[k][0] * 1000:.1f} ms | {out:.3f} s | {out / cat_median:.2f}× | {rss:.1f} MB |")
    old, new = (medians[k] for k in builds)
    print(f"\n{names[1]} / {names[0]}: launch {new[0] / old[0]:.2f}, output {new[1] / old[1]:.2f}, "
          f"peak RSS {new[2] / old[2]:.2f}")


if __name__ == "__main__":
    main()
