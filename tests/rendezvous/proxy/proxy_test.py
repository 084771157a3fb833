"""The store proxy over real sockets, in front of a real ddprun-store.

  python3 proxy_test.py STORE_BIN PROXY_BIN MODE [PYTHON...]

MODE: linearizability | linearizability_unwatch | pipelining | bounds | mux | unwatch | fallback |
      libuv_root | torch

linearizability: many raw clients (G1 and G2) run random operations on a few keys per round,
  every invocation/response timestamped; each key's history must be linearizable against the
  sequential model (linearizability.py). The checker's self-test runs first.
pipelining: requests sent in one segment, so what the proxy may coalesce is deterministic:
  combined ADDs get distinct running totals, a GET after the caller's own SET is never answered
  from an earlier GET, a WAIT after the caller's own DELETE does not return early, CANCEL_WAIT;
  a pipelined second WAIT and a G1 WATCH_KEY close that worker only. One root connection.
linearizability_unwatch: the same with --max-watched-keys 3 (keys of earlier rounds UNWATCHed,
  WAITs over the bound wait in line for room).
unwatch: 40 WAITs one after the other on new keys with --max-watched-keys 4: the root (--trace)
  sees 40 WATCH_KEY and enough UNWATCH to hold at most 4 registrations, on one connection.
mux: 64 ranks each WAIT on a key of their own through one proxy: the root (--trace) sees the
  proxy's start-up check and its one link, no WAIT; none is answered before its key is SET, all
  are once it is.
fallback: a relay that closes any connection asking for TAGGED (a 1.13 store, an older
  ddprun-store): the proxy does not start (exit 69, one line: connect the workers directly).
libuv_root: the same in front of torch 2.x's libuv TCPStore (run by an interpreter with torch;
  STORE_BIN unused).
torch: each given interpreter's real torch TCPStore client through the proxy.
"""
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from linearizability import linearizable, self_test  # noqa: E402
from proxy_harness import store_and_proxy  # noqa: E402
from store_wire import WireClient, encode  # noqa: E402

now = time.monotonic_ns


def client_run(port, gen, keys, n_ops, seed, start, history, errors):
    rng = random.Random(seed)
    try:
        c = WireClient(port, gen)
        start.wait()
        unbounded_sets = []  # SETs whose response point is the next reply on this connection

        def record(kind, key, arg, result, inv, res):
            op = {"kind": kind, "key": key, "arg": arg, "result": result, "inv": inv, "res": res}
            history.append(op)
            return op

        def replied(res):
            for op in unbounded_sets:
                op["res"] = res
            unbounded_sets.clear()

        plan = []
        for _ in range(n_ops):
            plan.append(rng.choice(["set", "get", "get", "get2", "cas", "delete", "add", "add", "add2", "getc",
                                    "wset", "wdel", "wait"]))
        plan += ["wset", "get"]  # every DELETE of the wait key is followed by a SET; the last reply bounds it
        for step in plan:
            s_key = rng.choice(keys["s"])
            if step == "wait" and gen == "G1":
                step = "get"  # a 1.13 client cannot cancel a WAIT
            if step == "set":
                v = f"{seed}:{rng.random()}".encode()
                inv = now()
                c.send(encode(gen, "set", s_key, v))
                unbounded_sets.append(record("set", s_key, v, None, inv, None))
            elif step == "wset":
                v = f"w{seed}:{rng.random()}".encode()
                inv = now()
                c.send(encode(gen, "set", keys["w"], v))
                unbounded_sets.append(record("set", keys["w"], v, None, inv, None))
            elif step in ("get", "get2", "getc"):
                key = keys["c"] if step == "getc" else s_key
                reps = 2 if step == "get2" else 1
                inv = now()
                c.send(*[encode(gen, "get", key)] * reps)
                for _ in range(reps):
                    r = c.read_reply("get")
                    t = now()
                    replied(t)
                    record("get", key, None, r, inv, t)
            elif step in ("add", "add2"):
                deltas = [rng.randint(1, 3) for _ in range(2 if step == "add2" else 1)]
                inv = now()
                c.send(*[encode(gen, "add", keys["c"], d) for d in deltas])
                for d in deltas:
                    r = c.read_reply("add")
                    t = now()
                    replied(t)
                    record("add", keys["c"], d, r, inv, t)
            elif step == "cas":
                expected = rng.choice([b"", b"x", f"{seed}".encode()])
                recent = [o["arg"] for o in history[-8:] if o["kind"] == "set" and o["key"] == s_key]
                if recent and rng.random() < 0.6:
                    expected = recent[-1]
                desired = f"cas{seed}:{rng.random()}".encode()
                inv = now()
                r = c.call("compare_set", s_key, expected, desired)
                t = now()
                replied(t)
                record("compare_set", s_key, (expected, desired), r, inv, t)
            elif step in ("delete", "wdel"):
                key = keys["w"] if step == "wdel" else s_key
                inv = now()
                r = c.call("delete", key)
                t = now()
                replied(t)
                record("delete", key, None, r, inv, t)
            elif step == "wait" and gen == "G2":
                # The key may stay deleted (its deleter may be this very client): give up after a
                # while with CANCEL_WAIT, like torch's client; a cancelled WAIT constrains nothing.
                inv = now()
                c.send(encode(gen, "wait", [keys["w"]]))
                c.sock.settimeout(2.0)
                try:
                    r = c.read_byte()
                except socket.timeout:
                    c.sock.settimeout(60.0)
                    c.send(encode(gen, "cancel_wait"))
                    r = c.read_byte()
                    if r == 0:  # woken just before the cancel: WAIT_CANCELED follows
                        assert c.read_byte() == 1, "CANCEL_WAIT not answered"
                c.sock.settimeout(60.0)
                t = now()
                replied(t)
                if r == 0:
                    record("wait", keys["w"], None, r, inv, t)
                else:
                    assert r == 1, f"WAIT/CANCEL_WAIT answered {r}"
        c.close()
    except Exception as e:  # reported by the main thread
        errors.append(f"client {seed} ({gen}): {e!r}")
        start.abort()


def linearizability(port, rounds=80, clients=10, ops=12):
    self_test()
    checked = 0
    for rnd in range(rounds):
        keys = {"s": [f"r{rnd}/s0", f"r{rnd}/s1"], "c": f"r{rnd}/c", "w": f"r{rnd}/w"}
        history, errors = [], []
        start = threading.Barrier(clients)
        threads = [threading.Thread(target=client_run,
                                    args=(port, "G1" if i % 3 == 2 else "G2", keys, ops, rnd * 1000 + i, start,
                                          history, errors))
                   for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a client hung"
        assert not errors, errors
        by_key = {}
        for op in history:
            assert op["res"] is not None, f"unbounded op {op}"
            by_key.setdefault(op["key"], []).append(op)
        for key, ops_of_key in by_key.items():
            if not linearizable(ops_of_key):
                for op in sorted(ops_of_key, key=lambda o: o["inv"]):
                    print(op)
                raise AssertionError(f"round {rnd}: history of {key} is not linearizable")
            checked += len(ops_of_key)
    print(f"linearizability: {rounds} rounds, {checked} operations, every key linearizable")


def pipelining(port):
    a = WireClient(port, "G2")
    b = WireClient(port, "G2")
    # Three ADDs in one segment: one upstream ADD of 6, each caller its own running total.
    a.send(encode("G2", "add", "cnt", 1), encode("G2", "add", "cnt", 2), encode("G2", "add", "cnt", 3))
    assert [a.read_reply("add") for _ in range(3)] == [1, 3, 6]
    assert b.call("get", "cnt") == b"6"
    a.send(encode("G2", "add", "cnt", -6), encode("G2", "add", "cnt", 10))
    assert [a.read_reply("add") for _ in range(2)] == [0, 10]
    # A GET after the caller's own SET must see it, even with an identical GET queued before.
    b.call("set", "k", "old")
    a.send(encode("G2", "get", "k"), encode("G2", "set", "k", "new"), encode("G2", "get", "k"),
           encode("G2", "get", "k"))
    assert [a.read_reply("get") for _ in range(3)] == [b"old", b"new", b"new"]
    # Identical MULTI_GETs share one request and each gets every value.
    a.send(*[encode("G2", "multi_get", ["k", "cnt"])] * 2)
    assert [a.read_reply("multi_get", 2) for _ in range(2)] == [[b"new", b"10"]] * 2
    # A WAIT after the caller's own DELETE waits for a new SET (the fence keeps it behind the DELETE).
    b.call("set", "w", "1")
    a.send(encode("G2", "delete", "w"), encode("G2", "wait", ["w"]))
    assert a.read_reply("delete") == 1
    a.sock.settimeout(0.5)
    try:
        a.read_byte()
        raise AssertionError("WAIT returned although its own DELETE removed the key")
    except socket.timeout:
        pass
    a.sock.settimeout(60)
    b.call("set", "w", "2")
    assert a.read_byte() == 0
    # Two workers WAITing on one missing key: both answered by one SET.
    c = WireClient(port, "G2")
    a.send(encode("G2", "wait", ["w2"]))
    c.send(encode("G2", "wait", ["w2"]))
    b.call("set", "w2", "x")
    assert [a.read_byte(), c.read_byte()] == [0, 0]
    # A second WAIT before the first was answered (no torch client does that) closes that worker
    # only: one blocking request per worker connection.
    c.send(encode("G2", "wait", ["w3"]), encode("G2", "wait", ["w3"]))
    assert c.sock.recv(1) == b"", "pipelined WAITs accepted"
    c.close()
    # CANCEL_WAIT: WAIT_CANCELED, and the connection stays in step.
    a.send(encode("G2", "wait", ["never"]))
    a.send(encode("G2", "cancel_wait"))
    assert a.read_byte() == 1
    assert a.call("get", "k") == b"new"
    # PING is answered by the proxy (echo).
    assert a.call("ping", 1234) == 1234
    # A G1 client shares the key space.
    g1 = WireClient(port, "G1")
    assert g1.call("add", "cnt", 5) == 15
    assert g1.call("get", "k") == b"new"
    g1.close()
    # A 1.13 WATCH_KEY is not served (the tagged link carries no values): that worker is closed,
    # the others keep their connections.
    watcher = WireClient(port, "G1")
    watcher.send(bytes([7]) + struct.pack("<Q", 3) + b"/wk")
    assert watcher.sock.recv(1) == b"", "G1 WATCH_KEY served"
    assert b.call("get", "k") == b"new" and a.call("get", "k") == b"new"
    watcher.close()
    a.close()
    b.close()
    print("pipelining: OK")


def mux(port, ranks=64):
    waiters = [WireClient(port, "G2") for _ in range(ranks)]
    for i, w in enumerate(waiters):
        w.send(encode("G2", "wait", [f"mux/k{i}"]))
    writer = WireClient(port, "G2")
    assert writer.call("ping", 7) == 7
    time.sleep(0.5)
    for w in waiters:  # nothing answered before its key exists
        w.sock.settimeout(0.05)
        try:
            w.read_byte()
            raise AssertionError("WAIT answered before its key was set")
        except socket.timeout:
            pass
        w.sock.settimeout(60)
    for i in range(0, ranks, 2):  # half the keys: exactly those waiters answered
        writer.send(encode("G2", "set", f"mux/k{i}", b"x"))
    assert writer.call("get", f"mux/k{ranks - 2}") == b"x"
    for i, w in enumerate(waiters):
        if i % 2 == 0:
            assert w.read_byte() == 0
        else:
            w.sock.settimeout(0.05)
            try:
                w.read_byte()
                raise AssertionError(f"WAIT on mux/k{i} answered, its key was never set")
            except socket.timeout:
                pass
            w.sock.settimeout(60)
    for i in range(1, ranks, 2):
        writer.send(encode("G2", "set", f"mux/k{i}", b"y"))
    for i, w in enumerate(waiters):
        if i % 2 == 1:
            assert w.read_byte() == 0
    # A rank that WAITs on a key that exists is answered at once, through the same link.
    waiters[0].send(encode("G2", "wait", ["mux/k1", "mux/k2"]))
    assert waiters[0].read_byte() == 0
    for w in waiters + [writer]:
        w.close()
    print(f"mux: {ranks} WAITs on distinct keys answered")


def unwatch(port, rounds=40):
    """Run with --max-watched-keys 4: WAITs on ever new keys, one at a time."""
    waiter, writer = WireClient(port, "G2"), WireClient(port, "G2")
    for i in range(rounds):
        waiter.send(encode("G2", "wait", [f"uw/k{i}"]))
        writer.call("set", f"uw/k{i}", b"1")
        assert waiter.read_byte() == 0
    waiter.close()
    writer.close()
    print(f"unwatch: {rounds} WAITs on distinct keys answered")


def libuv_root(proxy_bin):
    """A torch libuv root does not take tagged mode: the proxy says, in one line, to connect the
    workers to it directly, and exits 69 (the agent's --store-proxy does the same in one line)."""
    from torch.distributed import TCPStore
    root = TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False)
    proxy = subprocess.run([proxy_bin, "--port", "0", "--upstream", f"127.0.0.1:{root.port}"],
                           capture_output=True, text=True, timeout=60)
    assert proxy.returncode == 69, proxy
    assert proxy.stdout == "", proxy
    lines = proxy.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddprun-store-proxy: the root store "), lines
    assert "does not take ddprun's tagged mode" in lines[0] and "directly" in lines[0], lines
    # The root still serves (the check left it as it was).
    root.set("lu/k", "1")
    assert root.get("lu/k") == b"1"
    print("libuv_root: OK")


def refusing_relay(store_port, refuse=("probe", "tagged")):
    """A relay to the store that closes every connection opening with what `refuse` names, as a
    store without the extension does: "probe", first byte PROBE's (0x40, a G1 watch link);
    "tagged", a G2 connection whose first request after VALIDATE is TAGGED (0x41)."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)

    def pipe(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def first_bytes(c, n):
        # Every upstream connection of the proxy sends at least 6 bytes at once (VALIDATE and a
        # request, or a G1 request of 9 bytes or more); give up waiting after a while anyway.
        deadline = time.monotonic() + 2
        head = b""
        while len(head) < n and time.monotonic() < deadline:
            head = c.recv(n, socket.MSG_PEEK)
            if len(head) < n:
                time.sleep(0.01)
        return head

    def serve():
        while True:
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            head = first_bytes(c, 6)
            is_probe = head[:1] == b"\x40"
            is_tagged = head[:1] == b"\x00" and head[5:6] == b"\x41"
            if ("probe" in refuse and is_probe) or ("tagged" in refuse and is_tagged):
                refusing_relay.refused.append("probe" if is_probe else "tagged")
                c.close()
                continue
            up = socket.create_connection(("127.0.0.1", store_port))
            threading.Thread(target=pipe, args=(c, up), daemon=True).start()
            threading.Thread(target=pipe, args=(up, c), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return lsock.getsockname()[1]


refusing_relay.refused = []


def fallback(store_bin, proxy_bin):
    """A root that closes a connection asking for tagged mode (a 1.13 store, an older ddprun-store):
    the proxy does not start; one line says to connect the workers to the root directly."""
    store = subprocess.Popen([store_bin, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True)
    try:
        relay = refusing_relay(int(store.stdout.readline()), refuse=("tagged",))
        proxy = subprocess.run([proxy_bin, "--port", "0", "--upstream", f"127.0.0.1:{relay}"],
                               capture_output=True, text=True, timeout=60)
    finally:
        store.terminate()
        store.wait(timeout=10)
    assert proxy.returncode == 69 and proxy.stdout == "", proxy
    lines = proxy.stderr.splitlines()
    assert len(lines) == 1 and "does not take ddprun's tagged mode" in lines[0], lines
    assert "connect the workers to it directly" in lines[0], lines
    assert refusing_relay.refused == ["tagged"], refusing_relay.refused
    print("fallback: OK")


def bounds(port):
    """Run with --idle-timeout 0.3: the store's hardening bounds hold for the proxy too."""
    import struct
    # A frame announcing a 1 TiB key is refused when its length arrives: the connection closes.
    bad = WireClient(port, "G2")
    bad.send(bytes([3]) + struct.pack("<Q", 1 << 40))
    assert bad.sock.recv(1) == b"", "oversize key length accepted"
    bad.close()
    # A worker stalled in the middle of a request is closed after --idle-timeout ...
    stalled = WireClient(port, "G2")
    stalled.send(encode("G2", "get", "k")[:5])
    assert stalled.sock.recv(1) == b"", "stalled connection kept"
    stalled.close()
    # ... but one blocked in WAIT (between requests) is not: it is answered a second later.
    waiter, writer = WireClient(port, "G2"), WireClient(port, "G2")
    waiter.send(encode("G2", "wait", ["late"]))
    time.sleep(1.0)  # several idle timeouts; not an assertion on time
    writer.call("set", "late", "1")
    assert waiter.read_byte() == 0
    # Others were served all along.
    assert writer.call("get", "late") == b"1"
    waiter.close()
    writer.close()
    print("bounds: OK")


TORCH_SCRIPT = r"""
import datetime, sys
import torch.distributed as dist
port = int(sys.argv[1])
s = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
tag = sys.argv[2]
s.set(tag + "/a", "1")
assert s.get(tag + "/a") == b"1"
assert s.add(tag + "/n", 5) == 5 and s.add(tag + "/n", 2) == 7
assert s.compare_set(tag + "/a", "1", "2") == b"2"
assert s.num_keys() >= 2
s.wait([tag + "/a"])
assert s.delete_key(tag + "/a")
try:
    s.wait([tag + "/nope"], datetime.timedelta(milliseconds=100))
    raise SystemExit("wait on a missing key returned")
except RuntimeError:
    pass
s.set(tag + "/b", "x")
assert s.get(tag + "/b") == b"x"
if hasattr(s, "multi_get"):
    s.multi_set([tag + "/m1", tag + "/m2"], ["1", "2"])
    assert s.multi_get([tag + "/m1", tag + "/m2"]) == [b"1", b"2"]
    s.append(tag + "/m1", "3")
    assert s.get(tag + "/m1") == b"13"
    assert s.check([tag + "/m1"])
print("torch", __import__("torch").__version__, "through the proxy: OK")
"""


def torch_clients(port, pythons):
    for i, py in enumerate(pythons):
        out = subprocess.run([py, "-c", TORCH_SCRIPT, str(port), f"t{i}"], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, f"{py}: {out.stdout}{out.stderr}"
        print(out.stdout.strip())


def main():
    store_bin, proxy_bin, mode = sys.argv[1:4]
    if mode == "libuv_root":
        return libuv_root(proxy_bin)
    proxy_args = {"bounds": ["--idle-timeout", "0.3"], "linearizability_unwatch": ["--max-watched-keys", "3"],
                  "unwatch": ["--max-watched-keys", "4"]}
    store_args = ["--trace"] if mode in ("mux", "unwatch") else []
    upstream = None
    if mode == "fallback":
        return fallback(store_bin, proxy_bin)
    with store_and_proxy(store_bin, proxy_bin, store_args=store_args, proxy_args=proxy_args.get(mode, []),
                         upstream=upstream) as run:
        if mode in ("linearizability", "linearizability_unwatch"):
            linearizability(run.proxy_port)
        elif mode == "unwatch":
            unwatch(run.proxy_port)
        elif mode == "pipelining":
            pipelining(run.proxy_port)
        elif mode == "mux":
            mux(run.proxy_port)
        elif mode == "bounds":
            bounds(run.proxy_port)
        elif mode == "torch":
            torch_clients(run.proxy_port, sys.argv[4:])
        else:
            raise SystemExit(f"unknown mode {mode}")
    stats = run.stats()
    print("proxy", stats)
    if mode == "pipelining":
        # 2 combined ADDs + 1, 1 GET, 1 MULTI_GET at least.
        assert stats["coalesced_requests"] >= 4, stats
        # Every request and WAIT on the one tagged link.
        assert stats["watch_waits"] >= 3 and stats["tagged_main_links"] == 1, stats
        assert stats["upstream_connections_opened"] == 1, stats
        assert stats["refused_requests"] == 2, stats  # the pipelined WAIT, the G1 WATCH_KEY
    if mode == "linearizability":
        # Through the tagged main link only: WATCH_KEY, PROBE and the notifications on the one
        # connection that carries the writes.
        assert stats["watch_waits"] > 0 and stats["tagged_main_links"] == 1, stats
        assert stats["upstream_connections_opened"] == 1, stats
    if mode == "linearizability_unwatch":
        # A bound of 3 keys: keys of earlier rounds are unwatched, and WAITs over the bound wait
        # in line for room; still linearizable, still one connection.
        assert stats["watch_waits"] > 0 and stats["tagged_main_links"] == 1, stats
        assert stats["unwatched_keys"] > 0 and stats["upstream_connections_opened"] == 1, stats
    if mode == "unwatch":
        lines = [line for line in run.store_log.splitlines() if "trace conn=" in line]
        watches = sum(1 for line in lines if " WATCH_KEY " in line)
        unwatches = sum(1 for line in lines if " UNWATCH " in line)
        print(f"unwatch: the root saw {watches} WATCH_KEY, {unwatches} UNWATCH")
        # Registrations stay within the bound on the one connection: no WAIT link, no rotation.
        assert watches == 40 and 0 < watches - unwatches <= 4, (watches, unwatches)
        assert stats["upstream_connections_opened"] == 1 and stats["watch_waits"] == 40, stats
        assert stats["unwatched_keys"] == unwatches, stats
    if mode == "mux":
        conns = {line.split("trace conn=")[1].split()[0] for line in run.store_log.splitlines()
                 if "trace conn=" in line}
        lines = [line for line in run.store_log.splitlines() if "trace conn=" in line]
        waits = sum(1 for line in lines if " WAIT " in line)
        tagged = sum(1 for line in lines if " TAGGED " in line)
        print(f"mux: the root saw {len(conns)} connections, {waits} WAITs, {tagged} TAGGED")
        # The proxy's start-up check of the root (VALIDATE, TAGGED, closed), then its one link.
        assert len(conns) == 2, conns
        assert tagged == 2, tagged
        assert waits == 0, waits
        assert stats["watch_waits"] == 65 and stats["tagged_main_links"] == 1, stats


if __name__ == "__main__":
    main()
