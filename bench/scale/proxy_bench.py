"""Store proxy benchmark: one GET's latency through a proxy vs direct, and the root store's load
(connections, requests) for a PyTorch-style init of N ranks on M nodes, direct vs one proxy per node.

  cmake --build build --target ddprun-store ddprun-store-proxy proxy_init_ranks
  python3 bench/scale/proxy_bench.py BUILD/bin [--ranks 128] [--nodes 8] [--gets 5000] [--python-ranks]

The root's counts come from the root itself (ddprun-store --trace: one line per request, tagged
with its connection), not from the proxy's own counters. Results are printed as a table; no
assertion is timed.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "rendezvous", "proxy"))
from store_wire import WireClient  # noqa: E402


def start(argv):
    log = tempfile.NamedTemporaryFile(prefix="proxy-bench-", suffix=".log", delete=False)
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    port = int(p.stdout.readline())
    return p, log, port


def stop(p, log):
    p.terminate()
    p.wait(timeout=10)
    with open(log.name) as f:
        text = f.read()
    os.unlink(log.name)
    return text


def get_latency(port, n):
    c = WireClient(port)
    c.call("set", "k", "v" * 64)
    for _ in range(200):
        c.call("get", "k")
    samples = []
    for _ in range(n):
        t = time.perf_counter_ns()
        c.call("get", "k")
        samples.append(time.perf_counter_ns() - t)
    c.close()
    samples.sort()
    return statistics.median(samples) / 1000, samples[int(len(samples) * 0.99)] / 1000


def init_job(ports_of_rank, world):
    """Each rank: connect; ADD-then-WAIT barrier; rank 0 SETs the unique id, all WAIT+GET it;
    each SETs its address and WAIT+GETs every peer's (Gloo's full exchange)."""
    errors = []
    start_line = threading.Barrier(world)

    def rank_main(r):
        try:
            c = WireClient(ports_of_rank[r])
            start_line.wait()
            if c.call("add", "barrier/count", 1) == world:
                c.call("set", "barrier/done", "1")
            c.call("wait", ["barrier/done"])
            if r == 0:
                c.call("set", "nccl/unique_id", "x" * 128)
            c.call("wait", ["nccl/unique_id"])
            c.call("get", "nccl/unique_id")
            c.call("set", f"gloo/addr/{r}", "y" * 170)
            for peer in range(world):
                c.call("wait", [f"gloo/addr/{peer}"])
                c.call("get", f"gloo/addr/{peer}")
            c.close()
        except Exception as e:
            errors.append(f"rank {r}: {e!r}")
            start_line.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return time.perf_counter() - t0


def init_job_native(tool, ports_of_rank, world):
    """The same init with one thread and one C++ StoreClient per rank (proxy_init_ranks)."""
    out = subprocess.run([tool, str(world), *map(str, ports_of_rank)], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip())


def root_load(trace):
    lines = re.findall(r"trace conn=(\d+) ", trace)
    return len(set(lines)), len(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("--ranks", type=int, default=128)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gets", type=int, default=5000)
    ap.add_argument("--python-ranks", action="store_true",
                    help="simulate ranks with Python threads even when proxy_init_ranks is built")
    a = ap.parse_args()
    store_bin = os.path.join(a.bin_dir, "ddprun-store")
    proxy_bin = os.path.join(a.bin_dir, "ddprun-store-proxy")

    # 1. One GET, direct vs through a proxy.
    store, slog, sport = start([store_bin, "--port", "0"])
    proxy, plog, pport = start([proxy_bin, "--port", "0", "--upstream", f"127.0.0.1:{sport}"])
    direct = get_latency(sport, a.gets)
    proxied = get_latency(pport, a.gets)
    stop(proxy, plog)
    stop(store, slog)
    print(f"GET latency (median / p99 us, {a.gets} sequential GETs, 64 B value):")
    print(f"  direct        {direct[0]:8.1f} / {direct[1]:8.1f}")
    print(f"  through proxy {proxied[0]:8.1f} / {proxied[1]:8.1f}   ratio {proxied[0] / direct[0]:.2f}x")

    # 2. Root load of an init, direct vs one proxy per node.
    rows = []
    for mode in ("direct", "proxy"):
        store, slog, sport = start([store_bin, "--port", "0", "--trace"])
        proxies = []
        if mode == "direct":
            ports = [sport] * a.ranks
        else:
            proxies = [start([proxy_bin, "--port", "0", "--upstream", f"127.0.0.1:{sport}"]) for _ in range(a.nodes)]
            per_node = -(-a.ranks // a.nodes)
            ports = [proxies[r // per_node][2] for r in range(a.ranks)]
        native = os.path.join(a.bin_dir, "proxy_init_ranks")
        if a.python_ranks or not os.path.exists(native):
            seconds = init_job(ports, a.ranks)
        else:
            seconds = init_job_native(native, ports, a.ranks)
        for p, log, _ in proxies:
            stop(p, log)
        conns, reqs = root_load(stop(store, slog))
        rows.append((mode, seconds, conns, reqs))
    kind = "Python threads" if a.python_ranks or not os.path.exists(os.path.join(a.bin_dir, "proxy_init_ranks")) \
        else "C++ StoreClient threads"
    print(f"Init of {a.ranks} ranks on {a.nodes} nodes ({kind}; barrier, unique id, Gloo address exchange):")
    print("  mode     init_s  root_connections  root_requests  requests/rank")
    for mode, seconds, conns, reqs in rows:
        print(f"  {mode:7s} {seconds:7.2f} {conns:17d} {reqs:14d} {reqs / a.ranks:14.1f}")


if __name__ == "__main__":
    main()
