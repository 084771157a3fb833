"""Issue 22, items 1-9: the store proxy against workers that break the rules, each beside honest
workers, through a real ddprun-store-proxy in front of a real ddprun-store.

  python3 proxy_hardening_test.py STORE_BIN PROXY_BIN CASE [PYTHON...]

CASE (the issue's item):
  queue_wait (1)       torch 2.x queue_pop(block=True) through the proxy wakes on queue_push
  reserved_keys (2)    a worker naming /ddprun... keys (root with a token) is closed alone;
                       real torch clients (every PYTHON given) beside it keep right answers
  worker_memory (3)    a WAIT that never completes, then 1,000 GETs of 1 MiB: bounded, closed
  big_wait (4)         one WAIT on 131,072 keys: others are not stalled, it is answered
  cancel_leak (5)      120 rounds of WAIT on 1,000 new keys + CANCEL_WAIT: the proxy stays flat
  barriers (6)         3 rounds of 200 BARRIERs whose workers leave: the root's descriptors return
  emfile (7)           the proxy out of descriptors backs off (no spinning), serves after
  shared_output (8)    one worker's large reads do not get the node's link (and a waiter) reset
  pipelined (9)        pipelined requests with large replies, one write at a time: every byte right

Each case prints one "figures" line: the proxy's and the store's RSS, CPU seconds and open
descriptors after the attack (docs/scale.md "Store proxy bounds" records them). Bounds asserted
are generous (this machine is shared); the honest worker's worst latency must stay under the
agents' 5 s heartbeat timeout.
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "bounds"))
from store_wire import WireClient, encode  # noqa: E402
from wire import proc_cpu_seconds, proc_status  # noqa: E402

MiB = 1 << 20
HEARTBEAT_TIMEOUT_S = 5.0
TOKEN = "hardening-test-token"


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def figures(name, proxy, store):
    out = []
    for what, p in (("proxy", proxy), ("store", store)):
        if p.poll() is None:
            out.append(f"{what} rss={proc_status(p.pid, 'VmRSS') // 1024}MB "
                       f"hwm={proc_status(p.pid, 'VmHWM') // 1024}MB cpu={proc_cpu_seconds(p.pid):.2f}s "
                       f"fds={fds(p.pid)}")
    print(f"figures {name}: " + "; ".join(out), flush=True)


class Procs:
    """A ddprun-store and a ddprun-store-proxy in front of it; logs kept for the asserts."""

    def __init__(self, store_bin, proxy_bin, store_args=(), proxy_args=(), store_env=None, proxy_prefix=()):
        self.store_log = tempfile.NamedTemporaryFile(prefix="hard-store-", delete=False)
        self.proxy_log = tempfile.NamedTemporaryFile(prefix="hard-proxy-", delete=False)
        env = dict(os.environ, **(store_env or {}))
        self.store = subprocess.Popen([store_bin, "--port", "0", *store_args], stdout=subprocess.PIPE,
                                      stderr=self.store_log, text=True, env=env)
        self.store_port = int(self.store.stdout.readline())
        self.proxy = subprocess.Popen([*proxy_prefix, proxy_bin, "--port", "0", "--upstream",
                                       f"127.0.0.1:{self.store_port}", *proxy_args],
                                      stdout=subprocess.PIPE, stderr=self.proxy_log, text=True)
        line = self.proxy.stdout.readline()
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError(f"proxy did not start: {line!r} {self.logs()}")
        self.port = int(line)

    def logs(self):
        with open(self.proxy_log.name) as p, open(self.store_log.name) as s:
            return p.read(), s.read()

    def close(self):
        for p in (self.proxy, self.store):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Honest:
    """A G2 worker GETting a key through the proxy in a loop, its worst latency recorded."""

    def __init__(self, port):
        self.c = WireClient(port, "G2")
        self.c.call("set", "honest/k", "v")
        self.worst = 0.0
        self.ops = 0
        self.error = None
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        try:
            while not self.stop:
                t0 = time.monotonic()
                got = self.c.call("get", "honest/k")
                self.worst = max(self.worst, time.monotonic() - t0)
                if got != b"v":
                    raise AssertionError(f"honest GET got {got!r}")
                self.ops += 1
                time.sleep(0.01)
        except Exception as e:  # noqa: BLE001
            self.error = e

    def finish(self):
        self.stop = True
        self.t.join(timeout=60)
        expect(self.error is None, f"the honest worker failed: {self.error!r}")
        expect(self.ops > 0, "the honest worker made no request")
        expect(self.worst < HEARTBEAT_TIMEOUT_S, f"the honest worker was stalled {self.worst:.1f} s")
        print(f"honest worker: {self.ops} GETs, worst {self.worst * 1000:.0f} ms", flush=True)


def g2(op, *parts):
    return bytes([op]) + b"".join(parts)


def field(b):
    b = b if isinstance(b, bytes) else b.encode()
    return struct.pack("<Q", len(b)) + b


def keylist(ks):
    return struct.pack("<Q", len(ks)) + b"".join(field(k) for k in ks)


QUEUE_SCRIPT = r"""
import datetime, sys, threading, time
import torch.distributed as dist
port = int(sys.argv[1])
popper = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=20))
pusher = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=20))
for i in range(3):
    threading.Timer(0.3, lambda: pusher.queue_push("jobs", f"item{i}")).start()
    t0 = time.monotonic()
    got = popper.queue_pop("jobs", block=True)
    took = time.monotonic() - t0
    assert got == f"item{i}".encode(), got
    print(f"queue_pop(block=True) {i}: {took:.2f} s", flush=True)
    assert took < 4.0, took
print("queue_wait: OK")
"""


def queue_wait(a, pythons):
    with Procs(a.store_bin, a.proxy_bin) as p:
        py = pythons[-1] if pythons else sys.executable
        out = subprocess.run([py, "-c", QUEUE_SCRIPT, str(p.port)], capture_output=True, text=True, timeout=120)
        print(out.stdout.strip())
        expect(out.returncode == 0, f"{out.stdout}{out.stderr}")
        figures("queue_wait", p.proxy, p.store)


RESERVED_SCRIPT = r"""
import datetime, sys
import torch.distributed as dist
port, tag, role = int(sys.argv[1]), sys.argv[2], sys.argv[3]
s = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10))
if role == "hostile":
    for key in ("/ddprun.replication/follow", "/ddprun/none/0/stop", "/ddprun-auth/challenge"):
        s2 = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10))
        try:
            s2.get(key)
            raise SystemExit(f"GET {key} answered")
        except RuntimeError:
            pass
    print("hostile: refused", flush=True)
else:
    s.set(tag + "/k", "v")
    sys.stdout.write("ready\n"); sys.stdout.flush()
    sys.stdin.readline()  # the hostile one has done its worst
    for _ in range(50):
        assert s.get(tag + "/k") == b"v"
    s.wait([tag + "/k"])
    print("honest", tag, "OK", flush=True)
"""


def reserved_keys(a, pythons):
    with Procs(a.store_bin, a.proxy_bin, store_env={"DDPRUN_RDZV_TOKEN": TOKEN}) as p:
        honest = []
        for i, py in enumerate(pythons or [sys.executable]):
            h = subprocess.Popen([py, "-c", RESERVED_SCRIPT, str(p.port), f"h{i}", "honest"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if h.stdout.readline().strip() != "ready":
                raise AssertionError(f"honest {py} did not start: {h.stderr.read()}")
            honest.append(h)
        waiter = WireClient(p.port, "G2")  # a worker blocked in WAIT all along
        waiter.send(encode("G2", "wait", ["reserved/later"]))
        raw = WireClient(p.port, "G2")
        raw.send(g2(3, field("/ddprun.replication/follow")))
        expect(raw.sock.recv(1) == b"", "raw replication GET answered")
        h = subprocess.run([pythons[-1] if pythons else sys.executable, "-c", RESERVED_SCRIPT, str(p.port), "x",
                            "hostile"], capture_output=True, text=True, timeout=60)
        expect(h.returncode == 0, h.stdout + h.stderr)
        for proc in honest:
            out, err = proc.communicate("go\n", timeout=60)
            expect(proc.returncode == 0, out + err)
            print(out.strip())
        w = WireClient(p.port, "G2")
        w.call("set", "reserved/later", "1")
        expect(waiter.read_byte() == 0, "the waiting worker was answered")
        figures("reserved_keys", p.proxy, p.store)
        proxy_log, _ = p.logs()
        expect("reserved for ddprun's agents" in proxy_log, proxy_log)
        expect("closing the workers' connections" not in proxy_log, proxy_log)


def worker_memory(a, _):
    with Procs(a.store_bin, a.proxy_bin, proxy_args=["--idle-timeout", "3"]) as p:
        w = WireClient(p.port, "G2")
        w.call("set", "big", b"x" * MiB)
        honest = Honest(p.port)
        base = proc_status(p.proxy.pid, "VmRSS")
        bad = WireClient(p.port, "G2")
        bad.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        bad.send(encode("G2", "wait", ["never"]))
        get = encode("G2", "get", "big")
        try:
            for _ in range(10):
                bad.send(get * 100)
        except OSError:
            pass  # closed by the proxy
        time.sleep(2)
        hwm = proc_status(p.proxy.pid, "VmHWM")
        honest.finish()
        figures("worker_memory", p.proxy, p.store)
        expect(hwm - base < 400 * 1024, f"proxy grew {(hwm - base) // 1024} MB for one worker")
        # The GETs wait behind the WAIT (nothing owed yet). Once it is answered, 1 GB of replies
        # would be owed to a worker that does not read: the proxy forwards no more of its GETs
        # than fit its output bound (the node's link and other workers are not held up), and
        # closes it past that bound or after --idle-timeout without progress.
        w.call("set", "never", b"1")
        time.sleep(1)
        other = WireClient(p.port, "G2")
        expect(len(other.call("get", "big")) == MiB, "another worker is served meanwhile")
        expect(proc_status(p.proxy.pid, "VmHWM") - base < 400 * 1024, "proxy grew past the bound")
        # Either closed (past the output bound, or after --idle-timeout with replies owed) or left
        # waiting on its own unread replies; in both cases bounded and alone.
        bad.sock.settimeout(5)
        got = 0
        try:
            while chunk := bad.sock.recv(1 << 20):
                got += len(chunk)
        except OSError:
            pass
        expect(got < 200 * MiB, f"{got} bytes were sent to a worker that does not read")
        expect(len(other.call("get", "big")) == MiB, "another worker is served after")
        expect(proc_status(p.proxy.pid, "VmHWM") - base < 400 * 1024, "proxy grew past the bound")


def big_wait(a, _):
    n = 131072
    with Procs(a.store_bin, a.proxy_bin) as p:
        honest = Honest(p.port)
        cpu0 = proc_cpu_seconds(p.proxy.pid)
        ks = [f"bw/{i}" for i in range(n)]
        waiter = WireClient(p.port, "G2")
        t0 = time.monotonic()
        waiter.send(g2(6, keylist(ks)))
        time.sleep(1)
        setter = WireClient(p.port, "G2")
        setter.send(g2(11, struct.pack("<Q", n), b"".join(field(k) + field("1") for k in ks)))
        expect(waiter.read_byte() == 0, "the big WAIT is answered")
        took = time.monotonic() - t0
        honest.finish()
        print(f"WAIT on {n} keys answered {took:.1f} s after it was sent "
              f"(proxy CPU {proc_cpu_seconds(p.proxy.pid) - cpu0:.2f} s)")
        figures("big_wait", p.proxy, p.store)


def cancel_leak(a, _):
    # A watched-key bound well under the keys used, so that what the link watches stays small and
    # only what cancelled WAITs leave behind could grow.
    with Procs(a.store_bin, a.proxy_bin, proxy_args=("--max-watched-keys", "20000")) as p:
        w, other = WireClient(p.port, "G2"), WireClient(p.port, "G2")
        rss = {}
        for r in range(120):
            w.send(g2(6, keylist([f"cl/{r}/{i}" for i in range(4000)])))
            time.sleep(0.02)
            other.call("get", "cl/none")  # behind the WAIT's PROBE on the link: it is armed now
            w.send(g2(12))
            expect(w.read_byte() == 1, "WAIT_CANCELED")
            expect(w.call("ping", r) == r, "in step")
            if r in (20, 119):
                time.sleep(0.3)
                rss[r] = proc_status(p.proxy.pid, "VmRSS")
        figures("cancel_leak", p.proxy, p.store)
        grew = (rss[119] - rss[20]) // 1024
        print(f"proxy RSS {rss[20] // 1024} -> {rss[119] // 1024} MB over 100 cancelled WAITs of 4,000 keys")
        expect(grew < 15, f"the proxy grew {grew} MB: cancelled WAITs leave something behind")


def barriers(a, _):
    with Procs(a.store_bin, a.proxy_bin, proxy_args=("--max-barrier-links", "150")) as p:
        base = fds(p.store.pid)
        for rnd in range(3):
            clients = [WireClient(p.port, "G2") for _ in range(200)]
            for c in clients:
                c.send(g2(18, field(f"bar/{rnd}"), struct.pack("<q", 10000)))
            greedy = WireClient(p.port, "G2")  # 50 BARRIERs pipelined on one connection
            greedy.send(g2(18, field(f"bar/g{rnd}"), struct.pack("<q", 10000)) * 50)
            time.sleep(1.5)
            peak = fds(p.store.pid)
            for c in clients + [greedy]:
                c.close()
            deadline = time.monotonic() + 30
            while fds(p.store.pid) > base + 5 and time.monotonic() < deadline:
                time.sleep(0.1)
            print(f"round {rnd}: root descriptors {base} -> {peak} -> {fds(p.store.pid)}", flush=True)
            expect(peak <= base + 150 + 5, f"{peak - base} BARRIER connections at once, over the bound of 150")
            expect(fds(p.store.pid) <= base + 5, "the root keeps the BARRIER connections of workers gone")
        # A BARRIER that completes, and a pipelined second one that is refused.
        a1, a2 = WireClient(p.port, "G2"), WireClient(p.port, "G2")
        a1.send(g2(18, field("bar/ok"), struct.pack("<q", 2)))
        a2.send(g2(18, field("bar/ok"), struct.pack("<q", 2)))
        expect(a1.read_byte() == 0 and a2.read_byte() == 0, "BARRIER of 2 released")
        a1.send(g2(18, field("bar/x"), struct.pack("<q", 9)) * 2)
        expect(a1.sock.recv(1) == b"", "a pipelined second BARRIER is refused")
        expect(a2.call("get", "bar/ok") == b"2", "others still served")
        figures("barriers", p.proxy, p.store)


def emfile(a, _):
    with Procs(a.store_bin, a.proxy_bin, proxy_prefix=("prlimit", "--nofile=64:64")) as p:
        socks = []
        for _ in range(120):
            try:
                socks.append(socket.create_connection(("127.0.0.1", p.port), timeout=5))
            except OSError:
                break
        time.sleep(0.5)
        cpu0 = proc_cpu_seconds(p.proxy.pid)
        time.sleep(3)
        spent = proc_cpu_seconds(p.proxy.pid) - cpu0
        print(f"proxy at its descriptor limit: {spent:.2f} CPU s in 3 s", flush=True)
        figures("emfile", p.proxy, p.store)
        expect(spent < 0.5, f"the proxy spins at EMFILE: {spent:.2f} CPU s in 3 s")
        for s in socks:
            s.close()
        time.sleep(0.5)
        c = WireClient(p.port, "G2")
        c.call("set", "after", "1")
        expect(c.call("get", "after") == b"1", "served once descriptors are free")
        proxy_log, _ = p.logs()
        expect("closing the workers' connections" not in proxy_log, proxy_log)


def shared_output(a, _):
    with Procs(a.store_bin, a.proxy_bin, store_args=("--max-pending-output-bytes", str(4 * MiB))) as p:
        w = WireClient(p.port, "G2")
        w.call("set", "big", b"y" * MiB)
        for rnd in range(5):
            waiter = WireClient(p.port, "G2")
            waiter.send(encode("G2", "wait", [f"so/{rnd}"]))
            expect(w.call("ping", 1) == 1, "")
            reader = WireClient(p.port, "G2")
            reader.send(encode("G2", "get", "big") * 40)  # 40 MiB of replies at once
            setter = WireClient(p.port, "G2")
            for i in range(50):
                setter.send(encode("G2", "set", f"so/{rnd}", str(i)))
            expect(waiter.read_byte() == 0, "the waiting worker was answered, not disconnected")
            for _ in range(40):
                expect(len(reader.read_reply("get")) == MiB, "each 1 MiB reply whole")
            for c in (waiter, reader, setter):
                c.close()
        figures("shared_output", p.proxy, p.store)
        proxy_log, store_log = p.logs()
        expect("closing the workers' connections" not in proxy_log, proxy_log)


def pipelined(a, _):
    with Procs(a.store_bin, a.proxy_bin) as p:
        for gen in ("G1", "G2"):
            c = WireClient(p.port, gen)
            vals = [bytes([65 + i % 26]) * (1000 + 97 * i) for i in range(300)]
            c.send(*[encode(gen, "set", f"pl/{gen}/{i}", v) for i, v in enumerate(vals)])
            c.send(*[encode(gen, "get", f"pl/{gen}/{i}") for i in range(300)] * 3)
            time.sleep(0.5)  # replies pile up while the worker does not read
            for _ in range(3):
                for i, v in enumerate(vals):
                    expect(c.read_bytes() == v, f"{gen} reply {i} intact")
            c.close()
        figures("pipelined", p.proxy, p.store)


class Args:
    pass


def main():
    import faulthandler
    faulthandler.dump_traceback_later(100, exit=True)
    a = Args()
    a.store_bin, a.proxy_bin, case = sys.argv[1:4]
    pythons = sys.argv[4:]
    globals()[case](a, pythons)
    print(f"{case}: OK")


if __name__ == "__main__":
    main()
