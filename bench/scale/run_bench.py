#!/usr/bin/env python3
"""Job start-up at scale: init_sim plays N ranks doing PyTorch's init (handshake, store-based
barrier, the NCCL id SET/GET, Gloo's address exchange) against each contender, and this script
prints one table row per (contender, N). See docs/scale.md.

  python3 bench/scale/run_bench.py --build build [--sizes 1000,4000,16000] [--contenders ddprun,libuv]

Contenders:
  ddprun  ddprun-store, every rank connected directly
  libuv   torch 2.x's TCPStore(use_libuv=True) in a python3 process, every rank connected directly
  proxy   ddprun-store behind one store proxy per 8 ranks: one ddprun-store-proxy process each
          (--proxy-bin; --proxy-max-n caps N: 2 cores, 24 GiB here), or with --proxy-farm many
          proxies per proxy_farm process. Root connections and requests are counted from the
          root's --trace log. --proxy-max-watched-keys sets the proxies' watched-key bound.
Per row it also prints CPU seconds user+sys per process class (init_sim shards, proxy farms, root)
and when the ranks finished each phase (connect, handshake, barrier, id, done: p50/p99/max); see
docs/scale.md, "Where the time goes at scale", for the farm options (--farms, --sim-shards,
--farm-prefault, --spread-root-links, --farm-base-port, --root-counts, --root-links-per-proxy).
A size the machine cannot hold (one process may open at most RLIMIT_NOFILE descriptors: the
store holds one per rank) is reported 'not run' with the limit that stopped it.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

LIBUV_SERVER = r"""
import resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False)
print(s.port, flush=True)
sys.stdin.read()  # serve until the driver closes our stdin
"""


NO_DNS_RESOLV = "/tmp/ddprun-scale-resolv.conf"


def without_dns(argv):
    """The libuv server does a reverse-DNS lookup per accepted connection, and this sandbox's
    resolver makes some of them wait 5 s (1k ranks: ~90 s). Run it in a private mount namespace
    whose /etc/resolv.conf points at nothing, so lookups fail at once, as on a cluster with a fast
    resolver (same as bench/store/run_bench.py; needs root for unshare -m)."""
    with open(NO_DNS_RESOLV, "w") as f:
        f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    return ["unshare", "-m", "sh", "-c", f"mount --bind {NO_DNS_RESOLV} /etc/resolv.conf && exec \"$0\" \"$@\"",
            *argv]


def start_server(kind, build):
    if kind == "ddprun":
        proc = subprocess.Popen([os.path.join(build, "bin", "ddprun-store"), "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    elif kind == "libuv":
        proc = subprocess.Popen(without_dns(["python3", "-c", LIBUV_SERVER]), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    else:
        raise ValueError(kind)
    line = proc.stdout.readline()
    if not line.strip():
        proc.kill()
        raise RuntimeError(f"{kind} server did not start")
    return proc, int(line)


def stop_server(proc):
    if proc.stdin:
        proc.stdin.close()
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_times(pid):
    """(user, sys) CPU seconds of a live process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tck, int(fields[12]) / tck
    except OSError:
        return 0.0, 0.0


def cpu_seconds(pid):
    return sum(cpu_times(pid))


def cpu_delta(pids, before):
    """Summed (user, sys) of live processes since `before` (a list of (user, sys) per pid)."""
    now = [cpu_times(p) for p in pids]
    return (round(sum(n[0] - b[0] for n, b in zip(now, before)), 2),
            round(sum(n[1] - b[1] for n, b in zip(now, before)), 2))


PHASES = ("connect", "handshake", "barrier", "id", "done")


def merge_phases(results):
    """Combines the shards' per-phase histograms (10 ms buckets from each shard's start) into
    percentiles of seconds since the earliest shard's start."""
    t0 = min(r["start"] for r in results)
    out = {}
    for ph in PHASES:
        counts = {}
        for r in results:
            shift = round((r["start"] - t0) * 100)
            for b, c in r.get("hist", {}).get(ph, []):
                counts[b + shift] = counts.get(b + shift, 0) + c
        total = sum(counts.values())
        if not total:
            continue
        qs, acc, it = {}, 0, iter(sorted(counts.items()))
        for q in (50, 90, 99, 100):
            while acc < total * q / 100:
                b, c = next(it)
                acc += c
                last = b
            qs[f"p{q}"] = round((last + 1) / 100, 2)
        out[ph] = qs
    return out


def run_sim(build, ports, world, shard_size, args, tag, hosts=()):
    """Runs init_sim in ceil(world / shard_size) processes (each holds one descriptor per rank it
    plays; --sim-shards asks for more) and combines their wall-clock spans, CPU times (user, sys,
    from /proc when each is done, before it closes its connections) and per-phase completion
    times."""
    shards = max(-(-world // shard_size), args.sim_shards)
    shard_size = -(-world // shards)
    procs = []
    for begin in range(0, world, shard_size):
        end = min(world, begin + shard_size)
        cmd = [os.path.join(build, "bin", "init_sim"), "--ports", ",".join(map(str, ports)),
               "--world", str(world), "--rank-begin", str(begin), "--rank-end", str(end),
               "--gloo-peers", str(args.gloo_peers), "--timeout", str(args.timeout), "--tag", tag]
        if hosts:
            cmd += ["--hosts", ",".join(hosts)]
        # --hold: a shard done keeps its connections (as ranks do) until every shard is done.
        procs.append(subprocess.Popen(cmd + ["--hold", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True))
    lines = [p.stdout.readline() for p in procs]
    cpu = [cpu_times(p.pid) for p in procs]
    for p in procs:
        p.stdin.close()
    results = []
    user = system = 0.0
    for p, line, (u, s) in zip(procs, lines, cpu):
        out = line + p.stdout.read()
        user += u
        system += s
        _, status, _ = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        results.append(json.loads(out.strip().splitlines()[-1]))
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        return {"error": errors[0]}
    return {
        "init_s": max(r["end"] for r in results) - min(r["start"] for r in results),
        "requests": sum(r["requests"] for r in results),
        "connections": sum(r["connections"] for r in results),
        "sim_procs": len(procs),
        "sim_cpu_s": [round(user, 2), round(system, 2)],
        "phases_s": merge_phases(results),
    }


def run_with_proxies(args, n, shard_size):
    trace_path = f"/tmp/ddprun-scale-root-{os.getpid()}.log"
    # --trace makes the root write a log line per request (2 syscalls each: ~10% of the root's
    # CPU at 64k); without it root requests and connections are the farms' upstream counters.
    trace = args.root_counts == "trace" or not args.proxy_farm
    with open(trace_path, "w") as trace_file:
        # --spread-root-links: the root listens on every address and each proxy of a farm links
        # to its own 127.1.x.y (see proxy_farm --spread-upstream).
        spread = args.proxy_farm and args.spread_root_links
        root = subprocess.Popen([os.path.join(args.build, "bin", "ddprun-store"), "--port", "0"]
                                + (["--host", "0.0.0.0"] if spread else [])
                                + (["--trace"] if trace else []),
                                stdout=subprocess.PIPE, stderr=trace_file, text=True)
    proxies = []
    farm_logs = []
    try:
        root_port = int(root.stdout.readline())
        count = (n + 7) // 8
        # The farms' own log lines (a proxy closing its workers says why) and their counters at
        # exit: in a file per farm, passed on to our stderr at the end.
        watch_args = [] if args.proxy_max_watched_keys is None else [
            "--max-watched-keys", str(args.proxy_max_watched_keys)]
        if args.proxy_farm:
            # Many proxies per process. Each holds 12 descriptors at most (listener, 8 workers,
            # its one root link, a BARRIER link or two). --farms asks for more processes than the
            # descriptor limit needs.
            fds = 12
            farms = max(-(-count // max(1, (shard_size - 64) // fds)), args.farms)
            per_farm = -(-count // farms)  # balanced: one farm's thread is one core at most
            # Each farm listens on its own 127.0.2.x address, so that the proxies' listening
            # ports do not come out of the ephemeral range their root links use on 127.0.0.1.
            # Their ports are fixed (--farm-base-port, below the ephemeral range), so that the
            # listeners do not take ephemeral ports that the root links from 127.0.0.1 need (a
            # port bound by any listener is skipped by connect()).
            farm_hosts = []
            for k, begin in enumerate(range(0, count, per_farm)):
                farm_hosts.append(f"127.0.2.{k + 1}")
                farm_logs.append(open(f"/tmp/ddprun-scale-farm-{os.getpid()}-{k}.log", "w+"))
                extra = ["--base-port", str(args.farm_base_port)] if args.farm_base_port else []
                if spread:
                    extra += ["--spread-upstream", "1"]
                if args.farm_prefault:
                    extra += ["--prefault-mib", str(min(per_farm, count - begin) + 64)]
                proxies.append(subprocess.Popen(
                    [os.path.join(args.build, "bin", "proxy_farm"), "--upstream", f"127.0.0.1:{root_port}",
                     "--count", str(min(per_farm, count - begin)), "--host", farm_hosts[-1], *watch_args,
                     *extra],
                    stdout=subprocess.PIPE, stderr=farm_logs[-1], text=True))
            ports, hosts = [], []
            for p, host in zip(proxies, farm_hosts):
                line = p.stdout.readline().strip()
                if not line:
                    raise RuntimeError("proxy_farm did not start")
                ports += [int(x) for x in line.split(",")]
                hosts += [host] * len(line.split(","))
        else:
            for _ in range(count):
                proxies.append(subprocess.Popen([args.proxy_bin, "--upstream", f"127.0.0.1:{root_port}", "--port", "0",
                                                 *watch_args],
                                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
            ports = [int(p.stdout.readline()) for p in proxies]
            hosts = []
        cpu0 = cpu_times(root.pid)
        farm0 = [cpu_times(p.pid) for p in proxies]
        with open(trace_path) as f:
            before = sum(1 for line in f if "trace conn=" in line)
        load0 = os.getloadavg()[0]
        r = run_sim(args.build, ports, n, shard_size, args, f"proxy{n}-{time.time_ns()}", hosts)
        root_user, root_sys = cpu_delta([root.pid], [cpu0])
        r["root_cpu_s"] = round(root_user + root_sys, 2)
        r["root_user_sys_s"] = [root_user, root_sys]
        r["farm_procs"] = len(proxies)
        r["farm_cpu_s"] = list(cpu_delta([p.pid for p in proxies], farm0))
        r["load"] = [round(load0, 1), round(os.getloadavg()[0], 1)]
        if trace:
            conns = set()
            requests = 0
            with open(trace_path) as f:
                for line in f:
                    if "trace conn=" in line:
                        requests += 1
                        conns.add(line.split("trace conn=")[1].split()[0])
            r["root_requests"] = requests - before
            r["root_connections"] = len(conns)
        return r
    finally:
        for p in proxies:
            p.terminate()
        for p in proxies:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        stop_server(root)
        os.unlink(trace_path)
        counters = []
        for f in farm_logs:
            f.seek(0)
            for line in f:
                if line.startswith("{"):
                    counters.append(json.loads(line))
                else:
                    sys.stderr.write(line)
            f.close()
            os.unlink(f.name)
        if not trace and "r" in locals() and len(counters) == len(farm_logs):
            # Each proxy's requests to the root (fences, WATCH_KEY, PROBE included) and the
            # connections it opened to it, summed over the farms.
            r["root_requests"] = sum(c["upstream_requests"] for c in counters)
            r["root_connections"] = sum(c["upstream_connections_opened"] for c in counters)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--sizes", default="1000,4000,16000,64000,100000")
    ap.add_argument("--contenders", default="ddprun,libuv,proxy")
    ap.add_argument("--gloo-peers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--proxy-bin", default="", help="ddprun-store-proxy binary (contender 'proxy')")
    ap.add_argument("--proxy-farm", action="store_true",
                    help="run the proxies as bench/scale/proxy_farm processes (many per process: "
                         "N up to the root's descriptor limit) instead of one --proxy-bin each")
    ap.add_argument("--proxy-max-n", type=int, default=4000,
                    help="largest N run with proxies (N/8 proxy processes)")
    ap.add_argument("--proxy-max-watched-keys", type=int, default=None,
                    help="the proxies' --max-watched-keys (default: theirs)")
    ap.add_argument("--sim-shards", type=int, default=1,
                    help="init_sim processes at least (more if the descriptor limit needs more)")
    ap.add_argument("--farms", type=int, default=1,
                    help="proxy_farm processes at least (more if the descriptor limit needs more)")
    ap.add_argument("--root-counts", choices=("trace", "farms"), default="farms",
                    help="with --proxy-farm: count root requests and connections from the root's --trace "
                         "log, or from the farms' upstream counters (default; the root runs untraced)")
    ap.add_argument("--farm-base-port", type=int, default=20000,
                    help="proxy k of each farm listens on this + k (0: kernel-picked, ephemeral ports)")
    ap.add_argument("--spread-root-links", action=argparse.BooleanOptionalAction, default=True,
                    help="with --proxy-farm: the root listens on 0.0.0.0 and each proxy connects to its "
                         "own 127.1.x.y (connect()'s port search is O(links to one address) per link)")
    ap.add_argument("--farm-prefault", action="store_true",
                    help="farms touch ~1 MiB of heap per proxy before the run (measures the page faults' share)")
    ap.add_argument("--root-links-per-proxy", type=int, default=1,
                    help="root connections each proxy holds (the tagged main link: 1; main + watch link "
                         "with a root that has no tagged mode: 2); sizes over the root's "
                         "descriptor limit are reported 'not run'")
    ap.add_argument("--json", action="store_true", help="print one JSON object per row instead of the table")
    args = ap.parse_args()

    fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    # Headroom for the process's own descriptors (listener, epoll, stdio, python's).
    max_per_process = fd_limit - 64
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        for kind in args.contenders.split(","):
            row = {"contender": kind, "N": n, "agents": n // 8}
            if kind == "proxy" and not args.proxy_bin and not args.proxy_farm:
                row["note"] = "not run: no --proxy-bin (the node-local proxy is not built in this tree)"
            elif kind == "proxy" and n > args.proxy_max_n and not args.proxy_farm:
                row["note"] = (f"not run: N over --proxy-max-n {args.proxy_max_n} ({n // 8} proxy processes "
                               f"on {os.cpu_count()} cores)")
            elif kind == "proxy" and -(-n // 8) * args.root_links_per_proxy > max_per_process:
                row["note"] = (f"not run: the root would hold {-(-n // 8) * args.root_links_per_proxy} "
                               f"connections ({args.root_links_per_proxy} per proxy), over the "
                               f"{fd_limit}-descriptor limit per process (RLIMIT_NOFILE hard)")
            elif kind == "proxy":
                row.update(run_with_proxies(args, n, max_per_process))
            elif n > max_per_process:
                row["note"] = (f"not run: the store would hold {n} connections, over the "
                               f"{fd_limit}-descriptor limit per process (RLIMIT_NOFILE hard)")
            else:
                proc, port = start_server(kind, args.build)
                try:
                    cpu0 = cpu_times(proc.pid)
                    load0 = os.getloadavg()[0]
                    r = run_sim(args.build, [port], n, max_per_process, args, f"{kind}{n}-{time.time_ns()}")
                    row.update(r)
                    root_user, root_sys = cpu_delta([proc.pid], [cpu0])
                    row["root_cpu_s"] = round(root_user + root_sys, 2)
                    row["root_user_sys_s"] = [root_user, root_sys]
                    row["load"] = [round(load0, 1), round(os.getloadavg()[0], 1)]
                    row["root_connections"] = r.get("connections")
                    row["root_requests"] = r.get("requests")
                finally:
                    stop_server(proc)
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
    if args.json:
        return
    load = os.getloadavg()[0]
    print(f"gloo peers per rank: {args.gloo_peers}; load average at the end: {load:.1f} on {os.cpu_count()} cores")
    print(f"{'contender':<9} {'N':>7} {'init s':>8} {'root conns':>10} {'root reqs':>10} {'root CPU s':>10}  note")
    for r in rows:
        if "init_s" in r:
            print(f"{r['contender']:<9} {r['N']:>7} {r['init_s']:>8.2f} {r['root_connections']:>10} "
                  f"{r['root_requests']:>10} {r['root_cpu_s']:>10}")
            cpu = f"sim {r['sim_cpu_s'][0]}+{r['sim_cpu_s'][1]} ({r['sim_procs']} procs)"
            if "farm_cpu_s" in r:
                cpu += f", farms {r['farm_cpu_s'][0]}+{r['farm_cpu_s'][1]} ({r['farm_procs']} procs)"
            cpu += f", root {r['root_user_sys_s'][0]}+{r['root_user_sys_s'][1]}"
            print(f"{'':<9} CPU s user+sys: {cpu}; load {r['load'][0]}->{r['load'][1]}")
            print(f"{'':<9} done by (s, p50/p99/max): " + ", ".join(
                f"{ph} {q['p50']}/{q['p99']}/{q['p100']}" for ph, q in r["phases_s"].items()))
        else:
            print(f"{r['contender']:<9} {r['N']:>7} {'-':>8} {'-':>10} {'-':>10} {'-':>10}  {r.get('note', r.get('error'))}")


if __name__ == "__main__":
    sys.exit(main())
