#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Issue 35, item 14: how often a rank of PyTorch's test_init_method_tcp_with_torchelastic pattern
(4 ranks, gloo, init_method=tcp://MASTER, no destroy_process_group) dies at exit, under ddprun and
under torchrun 2.x, side by side (the launchers alternate, run by run).

  bench/launcher/exit_abort_bench.py [--build build] [--runs 20] [--launchers ddprun,torchrun]

A run is bad when the launcher does not end 0, or a rank's stderr says it aborted ("terminate
called", SIGABRT / signal 6). Prints the counts per launcher, and the first bad run's stderr tail.
Exit 0 when no ddprun run was bad, 1 otherwise, 77 without torch (CTest
launcher.torch.init_method_exit runs a few iterations of ddprun alone, with
--tolerate-exit-abort: a rank that dies in the interpreter's exit after every rank printed Done,
reported by ddprun as 134 naming the SIGABRT, is counted and printed but does not fail it).
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "init_method_worker.py")
ABORT = re.compile(r"terminate called|SIGABRT|Signals\.SIGABRT|signal 6\b|Aborted", re.I)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prefix(name, build):
    if name == "ddprun":
        path = os.environ.get("DDPRUN") or os.path.join(build, "bin", "ddprun")
        if not os.path.exists(path):
            path = os.path.join(build, "launcher", "ddprun")
        return [path]
    return [sys.executable, "-m", "torch.distributed.run"]


def run_once(cmd_prefix, timeout, is_ddprun):
    port = free_port()
    cmd = cmd_prefix + ["--nnodes=1", "--nproc-per-node=4", "--master-addr=localhost",
                        f"--master-port={port}", "--monitor-interval=1", WORKER,
                        f"--init-method=tcp://localhost:{port}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDPRUN_", "TORCHELASTIC_"))}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True, errors="replace")
    start = time.monotonic()
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return "timeout", err, time.monotonic() - start
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if ABORT.search(err):
        # Every rank did its work and one died in the interpreter's exit (torch's teardown race,
        # docs/launcher.md): told apart from an abort before the work, which nothing excuses.
        # Under ddprun the run must then end 134 naming the SIGABRT, as for any failure.
        if out.count("Done") == 4 and (not is_ddprun or (
                p.returncode == 134 and "failed with signal SIGABRT" in err)):
            return "abort at exit", err, time.monotonic() - start
        return "abort", err, time.monotonic() - start
    if p.returncode != 0:
        return f"rc {p.returncode}", err, time.monotonic() - start
    if out.count("Done") != 4:
        return "missing Done", out + err, time.monotonic() - start
    return "ok", err, time.monotonic() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--launchers", default="ddprun,torchrun")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--tolerate-exit-abort", action="store_true",
                    help="a rank dying in the interpreter's exit after every rank printed Done, "
                         "reported faithfully, is counted and printed but not bad (CTest: torch's "
                         "own teardown race must not fail CI; the rate is this script's job)")
    args = ap.parse_args()
    if subprocess.run([sys.executable, "-c", "import torch.distributed"],
                      capture_output=True).returncode != 0:
        print("skipped: no torch.distributed in " + sys.executable)
        return 77
    names = args.launchers.split(",")
    tally = {n: {} for n in names}
    first_bad = {}
    for i in range(args.runs):
        for n in names:
            verdict, err, secs = run_once(prefix(n, args.build), args.timeout, n == "ddprun")
            tally[n][verdict] = tally[n].get(verdict, 0) + 1
            tolerated = verdict == "ok" or (args.tolerate_exit_abort and verdict == "abort at exit")
            if not tolerated and n not in first_bad:
                first_bad[n] = err[-3000:]
            print(f"run {i + 1} {n}: {verdict} ({secs:.1f} s)", file=sys.stderr, flush=True)
    for n in names:
        bad = sum(c for v, c in tally[n].items() if v != "ok")  # the rate, whatever is tolerated
        print(f"{n}: {bad} of {args.runs} runs bad {dict(sorted(tally[n].items()))}")
    for n, err in first_bad.items():
        print(f"--- first bad {n} run, stderr tail:\n{err}")
    return 1 if "ddprun" in first_bad else 0


if __name__ == "__main__":
    sys.exit(main())
