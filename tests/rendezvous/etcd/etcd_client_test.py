#!/usr/bin/env python3
"""ddprun's etcd client against a real 3-member etcd cluster (tests/support/etcd_cluster.py):
every call; two racers for the same decision under an injected delay (exactly one winner per
decision, hundreds of decisions); a streamed watch that survives the leader's kill -9; a lease
whose holder is kill -9'd expires; quorum lost: a call fails within its deadline with one line
naming etcd. Exits 77 when etcd is not installed."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from etcd_cluster import EtcdCluster, require_etcd  # noqa: E402

PROBE = sys.argv[1]


def run(*args, timeout=60):
    r = subprocess.run([PROBE, *args], capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)


def main():
    require_etcd()
    with EtcdCluster(3) as cluster:
        ep = cluster.endpoints
        rc, out = run(ep, "basic", "/t/basic/")
        print(out)
        check(rc == 0, "every client call against the cluster")

        # Races: both racers read the decision as open, wait, then decide by txn.
        rounds = 300
        racers = [subprocess.Popen([PROBE, ep, "race", "/t/race/", str(rounds), name, "1"],
                                   stdout=subprocess.PIPE, text=True) for name in ("a", "b")]
        wins = []
        for p in racers:
            out, _ = p.communicate(timeout=120)
            check(p.returncode == 0, f"racer finished: {out.strip()}")
            wins.append(int(out.split()[-1]))
        check(sum(wins) == rounds, f"exactly one winner for each of {rounds} decisions {wins}")

        # A watch across the leader's kill -9.
        watch = subprocess.Popen([PROBE, ep, "watch", "/t/w/", "12"], stdout=subprocess.PIPE,
                                 text=True)
        check(watch.stdout.readline().strip() == "watching", "watch started")
        check(run(ep, "put", "/t/w/before", "1", "5000")[0] == 0, "put before the kill")
        leader = cluster.leader()
        check(leader is not None, f"a leader ({leader})")
        t0 = time.time()
        cluster.kill(leader)
        rc, out = run(ep, "put", "/t/w/after", "2", "10000")
        pause = time.time() - t0
        check(rc == 0, f"put after the leader's kill ({out.strip()}, {pause:.2f} s)")
        out, _ = watch.communicate(timeout=30)
        check("put /t/w/before 1" in out and "put /t/w/after 2" in out,
              f"the watch saw both puts across the kill: {out!r}")
        cluster.restart(leader)
        cluster.wait_healthy()

        # A lease whose holder dies expires (TTL 2 s) and its key goes.
        holder = subprocess.Popen([PROBE, ep, "lease", "/t/lease/k", "2", "30"],
                                  stdout=subprocess.PIPE, text=True)
        check(holder.stdout.readline().strip() == "leased", "lease granted")
        watch = subprocess.Popen([PROBE, ep, "watch", "/t/lease/", "8"], stdout=subprocess.PIPE,
                                 text=True)
        check(watch.stdout.readline().strip() == "watching", "watch on the leased key")
        time.sleep(1.5)  # keepalives hold it past its TTL
        holder.kill()
        holder.wait()
        out, _ = watch.communicate(timeout=30)
        check("delete /t/lease/k" in out, f"the lease expired after its holder's kill: {out!r}")

        # Quorum lost: two of three members gone.
        others = [i for i in range(3)]
        cluster.kill(others[0])
        cluster.kill(others[1])
        t0 = time.time()
        rc, out = run(ep, "put", "/t/q", "1", "3000", timeout=30)
        took = time.time() - t0
        check(rc == 69 and out.startswith("unavailable etcd at") and out.count("\n") == 1,
              f"quorum lost: one line naming etcd, exit 69 ({out.strip()})")
        check(took < 15, f"within the call's deadline (3 s asked, {took:.1f} s taken)")
        cluster.restart(others[0])
        cluster.wait_healthy(members=[others[0], others[2]])
        check(run(ep, "put", "/t/q", "2", "10000")[0] == 0, "quorum back: calls work again")
    print("PASS")


if __name__ == "__main__":
    main()
