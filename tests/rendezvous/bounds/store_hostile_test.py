"""Issue 22, items 10 and 11: a hostile raw-socket client (a stranger: no token) beside an honest
one whose latency is measured, against a real ddprun-store.

  python3 store_hostile_test.py STORE_BIN CASE
CASE:
  duplicate_watches  3,000,000 WATCH_KEYs of one key on one connection are one registration: a
                     SET of that key does not stall the store (honest worst latency < 5 s, the
                     agents' heartbeat timeout)
  watch_bounds       a connection watching more keys than --max-watches-per-connection, or past
                     --max-watches for all together, is closed; the honest client is not
  fill_keys          a stranger filling --max-keys (store with a token) is refused at 7/8 of it;
                     a client that proved the job's token still stores the job's keys

Each case prints one "figures" line: the store's RSS, CPU seconds and descriptors after the attack
(docs/scale.md records them).
"""
import hashlib
import hmac
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wire import (G2Client, connect, field, g1, g2, is_closed_by_peer, proc_cpu_seconds, proc_status,  # noqa: E402
                  recv_exact, recv_field, store, u32, validate)

HEARTBEAT_TIMEOUT_S = 5.0
TOKEN = "hostile-test-token"


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def figures(name, proc):
    print(f"figures {name}: store rss={proc_status(proc.pid, 'VmRSS') // 1024}MB "
          f"hwm={proc_status(proc.pid, 'VmHWM') // 1024}MB cpu={proc_cpu_seconds(proc.pid):.2f}s "
          f"fds={len(os.listdir(f'/proc/{proc.pid}/fd'))}", flush=True)


class Honest:
    """SET then GET of its own key in a loop; the worst round trip recorded."""

    def __init__(self, port, key="honest/k"):
        self.c = G2Client(port)
        self.key = key
        self.worst = 0.0
        self.rounds = 0
        self.error = None
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        try:
            while not self.stop:
                t0 = time.monotonic()
                self.c.set(self.key, str(self.rounds))
                got = self.c.get(self.key)
                self.worst = max(self.worst, time.monotonic() - t0)
                if got != str(self.rounds).encode():
                    raise AssertionError(f"honest GET got {got!r}")
                self.rounds += 1
                time.sleep(0.01)
        except Exception as e:  # noqa: BLE001
            self.error = e

    def finish(self):
        self.stop = True
        self.t.join(timeout=60)
        expect(self.error is None, f"the honest client failed: {self.error!r}")
        expect(self.rounds > 0, "the honest client made no request")
        print(f"honest client: {self.rounds} rounds, worst {self.worst * 1000:.0f} ms", flush=True)
        expect(self.worst < HEARTBEAT_TIMEOUT_S, f"the honest client was stalled {self.worst:.1f} s")


def duplicate_watches(store_bin):
    with store(store_bin) as (proc, port, log):
        honest = Honest(port)
        hostile = connect(port)
        n = 3_000_000
        frame = g1("WATCH_KEY", field("dup"))
        sent = threading.Thread(target=lambda: hostile.sendall(frame * n), daemon=True)
        sent.start()
        got = 0
        while got < n:  # the registration replies (read so the store never holds them back)
            chunk = hostile.recv(1 << 20)
            expect(chunk, f"the store closed the hostile connection after {got} replies: {log()[-500:]}")
            expect(set(chunk) == {3}, "KEY_CALLBACK_REGISTERED")
            got += len(chunk)
        sent.join()
        # Changes of the key it watches 3,000,000 times: one notification each, nobody stalled.
        changer = G2Client(port)
        t0 = time.monotonic()
        for i in range(20):
            changer.set("dup", str(i))
        expect(changer.get("dup") == b"19", "the SETs applied")
        took = time.monotonic() - t0
        print(f"20 SETs of the key watched 3,000,000 times: {took * 1000:.0f} ms", flush=True)
        hostile.settimeout(30)
        notes = b""
        while notes.count(b"dup") < 20:
            chunk = hostile.recv(1 << 16)
            expect(chunk, "the watcher is notified")
            notes += chunk
        expect(notes.count(b"dup") == 20, "one notification per change, not one per WATCH_KEY")
        honest.finish()
        figures("duplicate_watches", proc)


def watch_bounds(store_bin):
    with store(store_bin, "--max-watches-per-connection", "50000", "--max-watches", "80000") as (proc, port, log):
        honest = Honest(port)
        greedy = connect(port)
        greedy.sendall(b"".join(g1("WATCH_KEY", field(f"g/{i}")) for i in range(60000)))
        expect(is_closed_by_peer(greedy, timeout=60), "a connection over --max-watches-per-connection is closed")
        expect("more than 50000 watched keys on one connection" in log(), log()[-1000:])
        first, second = connect(port), connect(port)
        first.sendall(b"".join(g1("WATCH_KEY", field(f"a/{i}")) for i in range(45000)))
        expect(len(recv_exact(first, 45000)) == 45000, "45,000 watches registered")
        second.sendall(b"".join(g1("WATCH_KEY", field(f"b/{i}")) for i in range(45000)))
        expect(is_closed_by_peer(second, timeout=60), "the connection past --max-watches is closed")
        expect("the store holds 80000 watches already" in log(), log()[-1000:])
        honest.finish()
        figures("watch_bounds", proc)


def prove(c):
    """ddprun's token handshake (rendezvous/token_auth.hpp) on a G2Client."""
    challenge = c.get("/ddprun-auth/challenge").decode()
    mac = hmac.new(TOKEN.encode(), f"ddprun store access\n{challenge}".encode(), hashlib.sha256).hexdigest()
    expect(c.get(f"/ddprun-auth/response/{mac}") == b"ok", "token accepted")


def fill_keys(store_bin):
    max_keys = 65536
    env_store = dict(os.environ, DDPRUN_RDZV_TOKEN=TOKEN)
    old_env = os.environ.copy()
    os.environ.update(env_store)
    try:
        ctx = store(store_bin, "--max-keys", str(max_keys))
        proc, port, log = ctx.__enter__()
    finally:
        os.environ.clear()
        os.environ.update(old_env)
    try:
        honest = Honest(port)
        stranger = connect(port)
        stranger.sendall(validate())
        batch = 4096
        stored = 0
        try:
            while stored < max_keys:
                stranger.sendall(b"".join(g2("SET", field(f"junk/{stored + i}"), field("x")) for i in range(batch)))
                stored += batch
                stranger.sendall(g2("PING", u32(1)))
                recv_exact(stranger, 4)
        except (ConnectionError, OSError):
            pass
        expect(is_closed_by_peer(stranger, timeout=30), "the stranger is refused before --max-keys")
        expect("without the job's token would take the store past" in log(), log()[-1000:])
        # The job's agents (token proven) still form: their keys fit in the reserve.
        agent = G2Client(port)
        prove(agent)
        for i in range(max_keys // 16):
            agent.set(f"/ddprun/job/0/key{i}", "v")
        expect(agent.get(f"/ddprun/job/0/key{max_keys // 16 - 1}") == b"v", "the job's keys stored")
        honest.finish()
        figures("fill_keys", proc)
    finally:
        ctx.__exit__(None, None, None)


if __name__ == "__main__":
    globals()[sys.argv[2]](sys.argv[1])
    print(f"{sys.argv[2]}: OK")
