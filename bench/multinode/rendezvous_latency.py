#!/usr/bin/env python3
"""Multi-node start latency on loopback: N ddprun agents (static and c10d), time from the last
agent's start to every worker running.

Each agent runs one worker, bench/cluster/mark_started.sh, which writes its start time (ns).
The first N-1 agents are started and given time to reach the rendezvous; then the clock starts,
the last agent is started, and the result is the latest worker start time minus that instant.
    bench/multinode/rendezvous_latency.py --build build [--agents 2,4,8] [--repeats 7]
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "..", "cluster", "mark_started.sh")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent_cmd(ddprun, mode, n, node_rank, port, run_id):
    common = [ddprun, "--nproc_per_node=1", "--shutdown-timeout=2"]
    if mode == "static":
        nodes = [f"--nnodes={n}", f"--node_rank={node_rank}", "--master_addr=127.0.0.1",
                 f"--master_port={port}"]
    else:
        nodes = [f"--nnodes={n}:{n}", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                 f"--rdzv_id={run_id}"]
    return common + nodes + [WORKER]


def one_run(ddprun, mode, n, settle):
    out = tempfile.mkdtemp(prefix="ddprun_mn_")
    env = dict(os.environ, BENCH_OUT=out)
    port = free_port()
    procs = []
    try:
        # In static mode node 0 hosts the store; start it first so the others find it. The
        # last agent started is node n-1.
        for rank in range(n - 1):
            procs.append(subprocess.Popen(agent_cmd(ddprun, mode, n, rank, port, "bench"), env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(settle)
        t0 = time.time_ns()
        procs.append(subprocess.Popen(agent_cmd(ddprun, mode, n, n - 1, port, "bench"), env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        codes = [p.wait(timeout=60) for p in procs]
        stamps = [int(open(os.path.join(out, f)).read()) for f in os.listdir(out)]
        if any(codes) or len(stamps) != n:
            return None
        return (max(stamps) - t0) / 1e6
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--agents", default="2,4,8")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--settle", type=float, default=0.5, help="seconds the first agents get to join")
    args = ap.parse_args()
    ddprun = os.path.join(args.build, "bin", "ddprun")
    if not os.access(ddprun, os.X_OK):
        sys.exit(f"no {ddprun}; build first")
    print(f"host: {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| agents | rendezvous | last agent start → all workers running: median (ms) | min | max | ok runs |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in [int(x) for x in args.agents.split(",")]:
        for mode in ("static", "c10d"):
            times = [t for t in (one_run(ddprun, mode, n, args.settle) for _ in range(args.repeats))
                     if t is not None]
            if times:
                print(f"| {n} | {mode} | {statistics.median(times):.1f} | {min(times):.1f} | "
                      f"{max(times):.1f} | {len(times)}/{args.repeats} |")
            else:
                print(f"| {n} | {mode} | failed | | | 0/{args.repeats} |")


if __name__ == "__main__":
    main()
