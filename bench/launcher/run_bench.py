#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ddprun against torchrun 2.x and torchrun 1.13, side by side, in one run. Prints Markdown tables.

  bench/launcher/run_bench.py [--build build] [--quick] [--only 1,2,3,4]

1. launch-to-exit of --nproc_per_node=8 /bin/true (hyperfine), plus a plain shell baseline;
2. failure propagation: rank 0 exits 3 after 0.5 s, the others sleep; time from that exit to
   the launcher's exit (median of N runs);
3. peak RSS of the launcher with 8 sleeping workers (VmHWM of the launcher process itself);
4. output path: 8 workers write ~1 GB of lines through ddprun, compared with the same data
   through `cat`; every line of ddprun's output is checked (no torn or lost line).
Each torchrun runs at --monitor_interval=0.1 and at its default (2.x: 0.1 s, 1.13: 5 s).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def launchers(build):
    ddprun = os.path.join(build, "bin", "ddprun")
    out = [("ddprun", [ddprun])]
    if subprocess.run(["python3", "-c", "import torch.distributed.run"], capture_output=True).returncode == 0:
        out.append(("torchrun 2.x", ["python3", "-m", "torch.distributed.run"]))
    if os.path.exists("/usr/bin/python3") and subprocess.run(
            ["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0:
        out.append(("torchrun 1.13", ["/usr/bin/python3", os.path.join(HERE, "torchrun113_shim.py")]))
    return out


INTERVALS = [("0.1", ["--monitor_interval=0.1"]), ("default", [])]


def env():
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"  # no notice lines
    return e


def fmt_ms(seconds):
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.2f} s"


def bench_launch(all_launchers, quick):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cmds = []
        for name, prefix in all_launchers:
            for label, flags in INTERVALS:
                cmd = " ".join(prefix + ["--nproc_per_node=8"] + flags + ["--no_python", "/bin/true"])
                slow = name != "ddprun"
                runs = 3 if slow else (20 if quick else 100)
                cmds.append((f"{name} ({label})", cmd, runs))
        cmds.append(("plain shell: 8 × /bin/true & wait", "sh -c 'for i in 1 2 3 4 5 6 7 8; do /bin/true & done; wait'",
                     20 if quick else 100))
        results = {}
        for label, cmd, runs in cmds:
            out = os.path.join(tmp, "h.json")
            subprocess.run(["hyperfine", "-N", "--warmup", "1", "--runs", str(runs), "--export-json", out,
                            "--style", "none", cmd], check=True, env=env(), stdout=subprocess.DEVNULL)
            r = json.load(open(out))["results"][0]
            results[label] = r
            rows.append((label, r["mean"], r["stddev"] or 0.0, r["median"], runs, cmd))
    base = results["ddprun (0.1)"]["mean"]
    print("\n### 1. Launch-to-exit, --nproc_per_node=8 /bin/true\n")
    print("| launcher | mean | ± sd | median | runs | vs ddprun |")
    print("|---|---|---|---|---|---|")
    for label, mean, sd, median, runs, _ in rows:
        print(f"| {label} | {fmt_ms(mean)} | {fmt_ms(sd)} | {fmt_ms(median)} | {runs} | {mean / base:.1f}× |")


def bench_failure(all_launchers, quick):
    print("\n### 2. Failure propagation: rank 0 exits 3 after 0.5 s, 7 others sleep\n")
    print("Time from rank 0's `date` stamp (just before it exits) to the launcher's exit, as seen by the "
          "parent; for ddprun also its own share, from reaping the root cause to its last event "
          "(from `--events`).\n")
    print("| launcher | stamp→launcher exit (median) | min | max | ddprun: reap→done (median) | runs | rc |")
    print("|---|---|---|---|---|---|---|")
    worker = os.path.join(HERE, "fail_worker.sh")
    # The stamp lives on tmpfs: on ext4, closing a rewritten file can delay the writer's exit by
    # tens of milliseconds (auto_da_alloc), which would be measured as launcher latency.
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        stamp = os.path.join(tmp, "stamp")
        events = os.path.join(tmp, "events.jsonl")
        for name, prefix in all_launchers:
            for label, flags in INTERVALS:
                runs = 9 if name == "ddprun" else (3 if quick else 5)
                delays, own, rcs = [], [], set()
                for _ in range(runs):
                    e = env()
                    e["FAIL_STAMP"] = stamp
                    extra = ["--events", events] if name == "ddprun" else []
                    p = subprocess.Popen(prefix + ["--nproc_per_node=8"] + flags + extra + ["--no_python", worker],
                                         env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    # No wait(timeout=...): Python implements it by polling with sleeps of up to
                    # 50 ms, which would be measured too. A watchdog bounds the run instead.
                    watchdog = threading.Timer(120, p.kill)
                    watchdog.start()
                    p.wait()
                    end = time.time()
                    watchdog.cancel()
                    delays.append(end - float(open(stamp).read()))
                    rcs.add(p.returncode)
                    if extra:
                        evs = [json.loads(l) for l in open(events)]
                        first_exit = next(x["time"] for x in evs if x["event"] == "worker_exit")
                        own.append(evs[-1]["time"] - first_exit)
                own_text = fmt_ms(statistics.median(own)) if own else "—"
                print(f"| {name} ({label}) | {fmt_ms(statistics.median(delays))} | {fmt_ms(min(delays))} | "
                      f"{fmt_ms(max(delays))} | {own_text} | {runs} | {','.join(map(str, sorted(rcs)))} |")


def peak_rss_kb(cmd, environment, stdout=subprocess.DEVNULL):
    """Runs cmd; returns (VmHWM of that process in kB, sampled until it exits, wall seconds)."""
    start = time.monotonic()
    p = subprocess.Popen(cmd, env=environment, stdout=stdout, stderr=subprocess.DEVNULL)
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
    return hwm, time.monotonic() - start


def bench_rss(all_launchers):
    print("\n### 3. Peak RSS of the launcher process, 8 workers (`sleep 2`)\n")
    print("| launcher | peak RSS (VmHWM) |")
    print("|---|---|")
    for name, prefix in all_launchers:
        hwm, _ = peak_rss_kb(prefix + ["--nproc_per_node=8", "--monitor_interval=0.1", "--no_python",
                                       "/bin/sleep", "2"], env())
        print(f"| {name} | {hwm / 1024:.1f} MB |")


def bench_output(build, quick):
    flooder = os.path.join(build, "bin", "output_flooder")
    ddprun = os.path.join(build, "bin", "ddprun")
    per_rank = 134217 if quick else 1342177  # lines of ~100 bytes: 8 × 134 MB ≈ 1.07 GB
    total_bytes = 8 * per_rank * 100
    with tempfile.TemporaryDirectory() as tmp:
        checker = os.path.join(tmp, "line_check")
        subprocess.run(["c++", "-O2", "-std=c++20", "-o", checker, os.path.join(HERE, "line_check.cpp")], check=True)
        gen = f"for r in 0 1 2 3 4 5 6 7; do RANK=$r {flooder} {per_rank} 88 & done; wait"
        cases = [
            ("8 writers → /dev/null (generator alone)", f"sh -c '{gen}' > /dev/null"),
            ("8 writers → one pipe → cat → /dev/null", f"sh -c '{gen}' | cat > /dev/null"),
            ("8 workers → ddprun (prefixing) → /dev/null", f"{ddprun} --nproc_per_node=8 {flooder} {per_rank} 88 > /dev/null"),
            ("8 workers → ddprun → pipe → cat → /dev/null", f"{ddprun} --nproc_per_node=8 {flooder} {per_rank} 88 | cat > /dev/null"),
        ]
        print(f"\n### 4. Output path, 8 workers × {per_rank} lines ≈ {total_bytes / 1e9:.2f} GB\n")
        print("| path | mean | ± sd | throughput | vs cat |")
        print("|---|---|---|---|---|")
        results = []
        for label, cmd in cases:
            out = os.path.join(tmp, "h.json")
            subprocess.run(["hyperfine", "--warmup", "1", "--runs", "3" if quick else "5", "--export-json", out,
                            "--style", "none", cmd], check=True, env=env(), stdout=subprocess.DEVNULL)
            r = json.load(open(out))["results"][0]
            results.append((label, r["mean"], r["stddev"] or 0.0))
        cat_mean = results[1][1]
        for label, mean, sd in results:
            print(f"| {label} | {fmt_ms(mean)} | {fmt_ms(sd)} | {total_bytes / mean / 1e6:.0f} MB/s | {mean / cat_mean:.2f}× |")
        check = subprocess.run(f"{ddprun} --nproc_per_node=8 {flooder} {per_rank} 88 | {checker} 8 {per_rank}",
                               shell=True, env=env(), capture_output=True, text=True)
        print(f"\nLine check of ddprun's output: `{check.stdout.strip()}` (rc {check.returncode})")
        hwm, _ = peak_rss_kb(["sh", "-c", f"exec {ddprun} --nproc_per_node=8 {flooder} {per_rank} 88 > /dev/null"], env())
        print(f"ddprun's peak RSS while carrying it: {hwm / 1024:.1f} MB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--quick", action="store_true", help="fewer runs, 0.1 GB output")
    ap.add_argument("--only", default="1,2,3,4")
    args = ap.parse_args()
    if not shutil.which("hyperfine"):
        sys.exit("hyperfine is not installed (apt-get install hyperfine)")
    all_launchers = launchers(os.path.abspath(args.build))
    print(f"launchers: {', '.join(n for n, _ in all_launchers)}; host: {os.cpu_count()} CPUs; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    only = set(args.only.split(","))
    if "1" in only:
        bench_launch(all_launchers, args.quick)
    if "2" in only:
        bench_failure(all_launchers, args.quick)
    if "3" in only:
        bench_rss(all_launchers)
    if "4" in only:
        bench_output(os.path.abspath(args.build), args.quick)


if __name__ == "__main__":
    main()
