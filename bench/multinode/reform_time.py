#!/usr/bin/env python3
"""Elastic scale-down on loopback: N agents at --nnodes=1:N, started together; one agent and its
workers SIGKILLed; time from the kill to every survivor's worker running again. `--victim other`
(default): an agent that does not host the workers' store; `--victim store-host`: the one that
does (on c10d the job then ends, reported as such; on etcd the survivors re-form around a new one).

Launchers: ddprun and torchrun on c10d (the first agent to bind the endpoint hosts the store);
ddprun-etcd / ddprun-etcd-preload (`--rdzv_backend etcd`) and torchrun-etcd-v2 (torchrun 2.15's
etcd-v2 backend, python-etcd) on one real 3-member etcd cluster started with `--enable-v2`
(tests/support/etcd_cluster.py), where the store's host is the node of rank 0's worker.

Two worker kinds (reform_worker.py): `sleep` workers that never talk to each other (the loss is
seen only by the agents' heartbeats) and `gloo` workers that all_reduce in a loop (the survivors'
collectives fail the moment a peer vanishes, as in real DDP). Same scenario for ddprun and for
torchrun (python3 -m torch.distributed.run, torch 2.x) with comparable settings: ddprun
heartbeat 0.5 s / timeout 2 s, torchrun keep-alive 1 s x 2; last call 1 s for both.
    bench/multinode/reform_time.py --build build [--nodes 2,3,8] [--repeats 3] [--workers sleep,gloo]
        [--launchers ddprun,ddprun-preload,torchrun,ddprun-etcd,ddprun-etcd-preload,torchrun-etcd-v2]
        [--victim other|store-host]
"""
import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "reform_worker.py")
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "support"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent_cmd(launcher, ddprun, n, port, worker, etcd=None, rdzv_id="bench"):
    """ETCD: the etcd cluster's endpoints (the *-etcd* launchers)."""
    backend = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}"]
    if launcher.startswith("ddprun-etcd"):
        backend = ["--rdzv_backend", "etcd", "--rdzv_endpoint", etcd, "--local_addr", "127.0.0.1",
                   "--master_port", "0"]
    elif launcher == "torchrun-etcd-v2":
        backend = ["--rdzv_backend", "etcd-v2", "--rdzv_endpoint", etcd.split(",")[0]]
    rdzv = ["--nnodes", f"1:{n}", "--nproc_per_node", "1", *backend, "--rdzv_id", rdzv_id,
            "--max_restarts", "3"]
    if launcher.startswith("ddprun"):
        # *-preload: every worker forked from a preloaded interpreter (docs/warm-start.md).
        # (--preload needs the program to be the .py, the interpreter given by --python.)
        program = (["--preload", "torch,torch.distributed", "--python", sys.executable, WORKER]
                   if launcher.endswith("-preload") else [sys.executable, WORKER])
        return [ddprun, *rdzv, "--rdzv_conf",
                "heartbeat_interval=0.5,heartbeat_timeout=2,last_call_timeout=1",
                "--shutdown-timeout", "2", *program, worker]
    # torchrun's etcd-v2 backend has no keep-alive settings (its TTLs are constants, 10 s).
    conf = ("last_call_timeout=1" if launcher == "torchrun-etcd-v2" else
            "keep_alive_interval=1,keep_alive_max_attempt=2,last_call_timeout=1")
    return [sys.executable, "-m", "torch.distributed.run", *rdzv, "--rdzv_conf", conf,
            "--monitor_interval", "0.1", WORKER, worker]


def marks(out):
    found = []
    for name in os.listdir(out):
        restart, rank, pid = (int(x) for x in name.split("-"))
        with open(os.path.join(out, name)) as f:
            found.append((restart, rank, pid, int(f.read() or 0)))
    return found


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def one_run(launcher, ddprun, n, worker, limit, victim_kind="other", etcd=None):
    out = tempfile.mkdtemp(prefix="ddprun_reform_")
    env = dict(os.environ, BENCH_OUT=out, PYTHONUNBUFFERED="1")
    port = free_port()
    rdzv_id = f"bench{time.time_ns()}"  # a fresh job on the shared etcd every run
    procs = []
    try:
        # All agents start together; the first to bind the endpoint hosts the store.
        logs = os.environ.get("BENCH_LOGS")  # a directory: keep each agent's stderr there
        for k in range(n):
            err = open(os.path.join(logs, f"{launcher}-{worker}-{n}-{k}.err"), "w") if logs else subprocess.DEVNULL
            procs.append(subprocess.Popen(agent_cmd(launcher, ddprun, n, port, worker, etcd, rdzv_id), env=env,
                                          stdout=subprocess.DEVNULL, stderr=err, start_new_session=True))
        if not wait_for(lambda: len([m for m in marks(out) if m[0] == 0]) == n, 120):
            return None
        time.sleep(1.0)  # steady state
        if etcd:  # the workers' store is on the node of rank 0's worker (its agent's, or the worker's)
            rank0 = next(m[2] for m in marks(out) if m[0] == 0 and m[1] == 0)
            host = _parent(rank0)
        else:
            host = store_host(port, [p.pid for p in procs])
        if victim_kind == "store-host":
            victim = next(p for p in procs if p.pid == host)
        else:
            victim = next(p for p in reversed(procs) if p.pid != host)
        # Its workers: whichever attempt-0 workers are children of the victim agent.
        victim_workers = [m[2] for m in marks(out) if m[0] == 0 and _parent(m[2]) == victim.pid]
        t0 = time.time_ns()
        os.kill(victim.pid, signal.SIGKILL)
        for pid in victim_workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        survivors = [p for p in procs if p is not victim]
        ok = wait_for(lambda: len({m[1] for m in marks(out) if m[0] >= 1}) >= n - 1
                      or all(p.poll() is not None for p in survivors), limit)
        if len({m[1] for m in marks(out) if m[0] >= 1}) < n - 1:
            return "job ended" if ok else "no re-form"
        return (max(m[3] for m in marks(out) if m[0] >= 1) - t0) / 1e9
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait()
        for restart, rank, pid, _ in marks(out):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(out, ignore_errors=True)


def store_host(port, pids):
    """The pid among `pids` that holds the listening socket of 127.0.0.1:port."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].split(":")[1], 16) == port:
                        inodes.add(cols[9])
        except OSError:
            pass
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return pid
        except OSError:
            pass
    return None


def _parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--nodes", default="2,3,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", default="sleep,gloo")
    ap.add_argument("--launchers", default="ddprun,torchrun")
    ap.add_argument("--limit", type=float, default=30, help="seconds to wait for the re-form")
    ap.add_argument("--victim", choices=("other", "store-host"), default="other")
    args = ap.parse_args()
    launchers = args.launchers.split(",")
    with contextlib.ExitStack() as stack:
        cluster = None
        if any("etcd" in name for name in launchers):
            from etcd_cluster import EtcdCluster  # noqa: E402 (tests/support)
            cluster = stack.enter_context(EtcdCluster(3, extra_args=["--enable-v2"]))
        table(args, launchers, cluster)


def table(args, launchers, cluster):
    ddprun = os.path.join(args.build, "bin", "ddprun")
    if not os.access(ddprun, os.X_OK):
        sys.exit(f"no {ddprun}; build first")
    print(f"host: {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"victim: {args.victim}")
    print("| nodes | workers | launcher | kill → survivors' workers running: median (s) | min | max | runs |")
    print("|---|---|---|---:|---:|---:|---|")
    for n in [int(x) for x in args.nodes.split(",")]:
        for worker in args.workers.split(","):
            for launcher in launchers:
                results = [one_run(launcher, ddprun, n, worker, args.limit, args.victim,
                                   cluster.endpoints if cluster else None)
                           for _ in range(args.repeats)]
                times = [r for r in results if isinstance(r, float)]
                other = [str(r) for r in results if not isinstance(r, float)]
                label = f"{n}→{n - 1}"
                if times:
                    print(f"| {label} | {worker} | {launcher} | {statistics.median(times):.2f} | {min(times):.2f} | "
                          f"{max(times):.2f} | {len(times)}/{args.repeats} {' '.join(other)} |", flush=True)
                else:
                    print(f"| {label} | {worker} | {launcher} | — | | | 0/{args.repeats}: {' '.join(other)} |",
                          flush=True)


if __name__ == "__main__":
    main()
