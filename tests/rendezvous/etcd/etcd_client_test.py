#!/usr/bin/env python3
"""ddprun's etcd client against a real 3-member etcd cluster (tests/support/etcd_cluster.py):
every call; two racers for the same decision under an injected delay (exactly one winner per
decision, hundreds of decisions); three racers joining 200 rounds with the agents' join_step
(each round closes once, every racer in it once, the largest budget kept); a streamed watch that survives the leader's kill -9; a lease
whose holder is kill -9'd expires; quorum lost: a call fails within its deadline with one line
naming etcd. Exits 77 when etcd is not installed."""
import json
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


def check(cond, what, quiet=False):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    if not quiet:
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

        # The agents' own decisions raced: 3 racers join 200 rounds of 3 nodes through join_step
        # (admission, the close at max, the job's budgets), each pausing 0-3 ms between its read
        # and its txn. Every round closes once, with each racer exactly once, the largest
        # published budget, and the same record as every racer read it.
        rounds, nodes = 200, 3
        racers = [subprocess.Popen([PROBE, ep, "join-race", "/t/join/", str(rounds), str(me), "3",
                                    str(nodes)], stdout=subprocess.PIPE, text=True)
                  for me in range(1, nodes + 1)]
        views = []
        for p in racers:
            try:
                out, _ = p.communicate(timeout=80)
            except subprocess.TimeoutExpired:
                for q in racers:
                    q.kill()
                check(False, "the join racers did not all finish within 80 s")
            check(p.returncode == 0, f"join racer finished: {out.strip()[-300:]}")
            views.append(dict(line.split(" ", 2)[1:] for line in out.splitlines()
                              if line.startswith("round ")))
        check(all(len(v) == rounds for v in views), "every racer saw every round close")
        for i in map(str, range(rounds)):
            records = {v[i] for v in views}
            check(len(records) == 1, f"round {i}: one record for every racer ({records})", quiet=True)
            r = json.loads(records.pop())
            leases = sorted(int(m["lease"]) for m in r["members"])
            check(not r["open"] and leases == [1, 2, 3] and r["restarts_used"] == nodes
                  and r["rescales_used"] == nodes, f"round {i}: closed once, each racer once, "
                  f"the largest budget ({r})", quiet=True)
        print(f"ok {rounds} raced rounds of {nodes} joiners: one closed record each")

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
