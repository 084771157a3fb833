#!/usr/bin/env python3
"""Store benchmarks: ddprun-store against PyTorch's own TCPStore servers, same load generator.

  python3 bench/store/run_bench.py --build build [--rounds 3] [--seconds 3]
        [--scale 1000,4000,16000] [--scale-rounds 3] [--libuv-scale-max 16000] [--torch113-scale-max 4000]
        [--parts throughput,pipelined,scale] [--servers ddprun,torch113,libuv] [--ddprun-bin PATH]
        [--baseline-bin PATH]

Servers: ddprun-store (G2 load), torch 1.13's server via /usr/bin/python3 (G1 load) and torch 2.x's
libuv server via python3 (G2 load), each started fresh on 127.0.0.1 port 0. Prints markdown tables.

The libuv server does a reverse-DNS (PTR) lookup for every accepted connection; where the
resolver is slow or unreachable (this sandbox: some lookups wait 5 s) that alone makes 1k clients
take ~95 s to connect. With --no-dns (the default, needs root for `unshare -m`) the PyTorch servers
run with a private /etc/resolv.conf pointing at 127.0.0.1, so lookups fail at once, as they would
on a cluster with a fast resolver.
Throughput rounds and scale runs are interleaved across servers and medians are reported, because
the machine may be shared. The load generator's own CPU per op is printed next to the server's: if
it were not below the server's, the generator would be what limits the number. Server CPU per op comes from /proc/<pid>/stat; RSS is sampled from /proc while the
load runs (peak minus the idle value before the load).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

SERVER_PY = (
    "import datetime, sys, time, torch, torch.distributed as d\n"
    "kw = {'use_libuv': True} if sys.argv[1] == 'libuv' else {}\n"
    "s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False,"
    " timeout=datetime.timedelta(seconds=900), **kw)\n"
    "print(s.port, flush=True)\n"
    "time.sleep(1e9)\n")


NO_DNS_RESOLV = "/tmp/ddprun-bench-resolv.conf"


def without_dns(argv):
    """Run argv in a private mount namespace whose /etc/resolv.conf points at nothing."""
    with open(NO_DNS_RESOLV, "w") as f:
        f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    return ["unshare", "-m", "sh", "-c", f"mount --bind {NO_DNS_RESOLV} /etc/resolv.conf && exec \"$0\" \"$@\"",
            *argv]


class Server:
    no_dns = True
    ddprun_bin = None
    baseline_bin = None  # --baseline-bin: a second ddprun-store build, run as its own column (A/B)

    def __init__(self, kind, build):
        self.kind = kind
        if kind == "ddprun":
            argv = [Server.ddprun_bin or os.path.join(build, "bin", "ddprun-store"), "--port", "0"]
        elif kind == "baseline":
            argv = [Server.baseline_bin, "--port", "0"]
        elif kind == "torch113":
            argv = ["/usr/bin/python3", "-c", SERVER_PY, "legacy"]
        else:
            argv = ["python3", "-c", SERVER_PY, "libuv"]
        if kind in ("torch113", "libuv") and Server.no_dns:
            argv = without_dns(argv)
        self.proto = "g1" if kind == "torch113" else "g2"
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.stop()
            raise RuntimeError(f"{kind} server did not start")
        self.port = int(line)
        time.sleep(0.3)

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def loadgen(build, server, args, timeout):
    argv = [os.path.join(build, "bin", "store_loadgen"), *args, "--port", str(server.port), "--proto", server.proto,
            "--server-pid", str(server.proc.pid)]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout).stdout
        return json.loads(out.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout} s"}


def throughput(build, kinds, rounds, seconds, pipeline=False):
    servers = {k: Server(k, build) for k in kinds}
    results = {k: [] for k in kinds}
    try:
        for _ in range(rounds):
            for k, s in servers.items():
                # The generator reads the server's CPU time itself, over exactly the counted interval.
                r = loadgen(build, s, ["throughput", "--clients", "64", "--value-bytes", "64",
                                       "--seconds", str(seconds), "--pipeline", "1" if pipeline else "0"],
                            timeout=seconds + 60)
                if "ops" in r:
                    r["cpu_us_per_op"] = r["server_cpu_us_per_op"]
                results[k].append(r)
    finally:
        for s in servers.values():
            s.stop()
    return results


def scale(build, kind, n, timeout):
    s = Server(kind, build)
    idle = s.rss_kib()
    peak = [idle]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], s.rss_kib())
            time.sleep(0.05)

    t = threading.Thread(target=sample)
    t.start()
    try:
        r = loadgen(build, s, ["barrier", "--clients", str(n), "--timeout", str(timeout)], timeout=timeout + 30)
    finally:
        done.set()
        t.join()
        s.stop()
    r["rss_idle_mib"] = idle / 1024
    r["rss_growth_mib"] = (peak[0] - idle) / 1024
    return r


NAMES = {"ddprun": "ddprun-store", "baseline": "ddprun-store (baseline build)", "torch113": "torch 1.13 server",
         "libuv": "torch 2.15 libuv server"}


def print_throughput(kinds, tp, title):
    print(f"## {title}\n")
    print("| server | ops/s (median) | all rounds | server CPU µs/op (median) | load generator CPU µs/op (median) |")
    print("|---|---:|---|---:|---:|")
    med = {}
    for k in kinds:
        ok = [r for r in tp[k] if "ops_per_s" in r]
        if not ok:
            print(f"| {NAMES[k]} | failed: {tp[k][0].get('error')} | | | |")
            continue
        med[k] = statistics.median(r["ops_per_s"] for r in ok)
        cpu = statistics.median(r["cpu_us_per_op"] for r in ok)
        gen = statistics.median(r.get("loadgen_cpu_us_per_op", float("nan")) for r in ok)
        rounds = ", ".join(f"{r['ops_per_s']:.0f}" for r in ok)
        print(f"| {NAMES[k]} | {med[k]:,.0f} | {rounds} | {cpu:.2f} | {gen:.2f} |")
    if "ddprun" in med:
        for k in ("baseline", "torch113", "libuv"):
            if k in med:
                print(f"\nddprun-store / {NAMES[k]}: {med['ddprun'] / med[k]:.2f}x", end="")
        print("\n")


def print_scale(a, kinds):
    print("## 2. Scale: N clients connect, each ADDs a barrier key, the last SETs a release key, all WAIT\n")
    print(f"Median of {a.scale_rounds} runs per cell (servers interleaved, each run on a fresh server).\n")
    print("| server | N | connect all (s) | release everyone (s) | all release runs (s) | server CPU for the release (s) "
          "| load generator CPU (s) | server RSS idle (MiB) | RSS growth (MiB) |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
    limits = {"ddprun": None, "baseline": None, "libuv": a.libuv_scale_max, "torch113": a.torch113_scale_max}
    for n in [int(x) for x in a.scale.split(",") if x]:
        runs = {k: [] for k in kinds}
        for _ in range(a.scale_rounds):
            for kind in kinds:
                if limits[kind] is not None and n > limits[kind]:
                    continue
                runs[kind].append(scale(a.build, kind, n, a.scale_timeout))
        for kind in kinds:
            if limits[kind] is not None and n > limits[kind]:
                print(f"| {NAMES[kind]} | {n} | not run (above --{kind}-scale-max) | | | | | | |")
                continue
            ok = [r for r in runs[kind] if "error" not in r]
            if not ok:
                print(f"| {NAMES[kind]} | {n} | {runs[kind][0]['error']} | | | | | | |")
                continue
            med = lambda f: statistics.median(r[f] for r in ok)
            all_runs = ", ".join(f"{r['release_s']:.3f}" for r in ok)
            failed = len(runs[kind]) - len(ok)
            if failed:
                all_runs += f" ({failed} failed: {runs[kind][0].get('error', '')})"
            print(f"| {NAMES[kind]} | {n} | {med('connect_s'):.3f} | {med('release_s'):.3f} | {all_runs} | "
                  f"{med('server_cpu_s'):.3f} | {med('loadgen_cpu_s'):.3f} | "
                  f"{med('rss_idle_mib'):.1f} | {med('rss_growth_mib'):.1f} |")
            sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--scale", default="1000,4000,16000")
    ap.add_argument("--scale-rounds", type=int, default=3)
    ap.add_argument("--libuv-scale-max", type=int, default=16000)
    ap.add_argument("--torch113-scale-max", type=int, default=4000)
    ap.add_argument("--parts", default="throughput,scale", help="any of throughput,pipelined,scale")
    ap.add_argument("--servers", default="ddprun,torch113,libuv")
    ap.add_argument("--ddprun-bin", help="ddprun-store binary to use instead of BUILD/bin/ddprun-store")
    ap.add_argument("--baseline-bin", help="another ddprun-store build, measured as server 'baseline' (A/B runs)")
    ap.add_argument("--no-dns", action=argparse.BooleanOptionalAction, default=True,
                    help="run the PyTorch servers without a reachable DNS resolver (see above)")
    ap.add_argument("--scale-timeout", type=float, default=240)
    a = ap.parse_args()
    Server.no_dns = a.no_dns
    Server.ddprun_bin = a.ddprun_bin
    Server.baseline_bin = a.baseline_bin
    kinds = [k for k in a.servers.split(",") if k]
    if a.baseline_bin and "baseline" not in kinds:
        kinds.insert(1, "baseline")
    parts = a.parts.split(",")

    print(f"# store benchmarks ({time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} cores, PyTorch servers {'without' if a.no_dns else 'with'} DNS)\n")
    if "throughput" in parts:
        print_throughput(kinds, throughput(a.build, kinds, a.rounds, a.seconds),
                         "1. Throughput: 64 clients, closed loop SET+GET, then ADD; 64-byte values")
        sys.stdout.flush()
    if "pipelined" in parts:
        print_throughput(kinds, throughput(a.build, kinds, a.rounds, a.seconds, pipeline=True),
                         "1b. Pipelined: 64 clients, SET+GET+ADD sent together (two replies per round trip)")
        sys.stdout.flush()
    if "scale" in parts:
        print_scale(a, [k for k in ("ddprun", "baseline", "libuv", "torch113") if k in kinds])
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
