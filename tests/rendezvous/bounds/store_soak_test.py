"""Adversarial store soak (issue 8): dozens of hostile clients send random mixes of every opcode with
hostile sizes, stall mid-frame, half-close, stop reading and reconnect in storms, while honest
PyTorch clients of both generations keep working.

  python3 store_soak_test.py STORE_BIN SECONDS PYTHON [PYTHON...]

Each PYTHON (an interpreter with torch: 1.13 speaks G1, 2.x G2) runs two honest clients. Asserts:
every honest operation succeeds, the server never dies, and its peak RSS stays under the sum of
its configured memory caps plus a fixed overhead.
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
from wire import G1, G2, connect, field, g1, g2, i64, keys, proc_status, store, u32, u64, validate  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
LIMITS = {
    "--max-value-bytes": 256 * KiB,
    "--max-request-bytes": 1 * MiB,
    "--max-keys-per-request": 4096,
    "--max-total-input-bytes": 8 * MiB,
    "--max-pending-output-bytes": 2 * MiB,
    "--max-total-output-bytes": 8 * MiB,
    "--max-reply-bytes": 2 * MiB,
    "--max-keys": 20000,
    "--max-store-bytes": 32 * MiB,
}
# Memory the caps allow: unfinished input, owed output and the store's contents, plus what one
# request and one reply in flight may hold.
CAPPED = (LIMITS["--max-total-input-bytes"] + LIMITS["--max-total-output-bytes"] + LIMITS["--max-store-bytes"]
          + LIMITS["--max-request-bytes"] + LIMITS["--max-reply-bytes"])
# Everything else: code, allocator slack and fragmentation, per-connection state of ~100
# connections, the shared read buffer.
FIXED_OVERHEAD = 40 * MiB
HOSTILE_THREADS = 40
HOSTILE_KEYS = [f"h/{i}" for i in range(48)]


def rand_key(rng):
    return rng.choice(HOSTILE_KEYS)


def rand_value(rng):
    r = rng.random()
    if r < 0.6:
        return os.urandom(rng.randint(0, 200))
    if r < 0.9:
        return b"v" * rng.randint(1 * KiB, 200 * KiB)
    return b"V" * rng.randint(256 * KiB - 16, 300 * KiB)  # some over --max-value-bytes


def random_g2_request(rng):
    op = rng.choice(list(G2))
    k = rand_key(rng)
    if op in ("VALIDATE", "PING"):
        return g2(op, u32(rng.getrandbits(32)))
    if op in ("GETNUMKEYS", "CANCEL_WAIT", "LIST_KEYS"):
        return g2(op)
    if op in ("GET", "DELETE_KEY", "QUEUE_POP", "QUEUE_LEN"):
        return g2(op, field(k))
    if op in ("SET", "APPEND"):
        return g2(op, field(k), field(rand_value(rng)))
    if op == "QUEUE_PUSH":
        return g2(op, field("h/q"), field(os.urandom(rng.randint(0, 64))))
    if op == "COMPARE_SET":
        return g2(op, field(k), field(rng.choice([b"", b"x"])), field(rand_value(rng)))
    if op in ("ADD", "BARRIER"):
        return g2(op, field(rng.choice(["h/cnt", k])), i64(rng.randint(-3, 1000)))
    if op in ("CHECK", "WAIT"):
        return g2(op, keys(*[rand_key(rng) + rng.choice(["", "/missing"]) for _ in range(rng.randint(0, 20))]))
    if op == "MULTI_GET":  # sometimes a reply far over --max-reply-bytes
        return g2(op, keys(*[k] * rng.choice([1, 10, 4000])))
    if op == "MULTI_SET":
        n = rng.randint(0, 8)
        return g2(op, u64(n) + b"".join(field(rand_key(rng)) + field(rand_value(rng)) for _ in range(n)))
    raise AssertionError(op)


def random_g1_request(rng):
    op = rng.choice(list(G1))
    k = rand_key(rng)
    if op in ("GETNUMKEYS",):
        return g1(op)
    if op in ("GET", "DELETE_KEY", "WATCH_KEY"):
        return g1(op, field(k))
    if op == "SET":
        return g1(op, field(k), field(rand_value(rng)))
    if op == "COMPARE_SET":
        return g1(op, field(k), field(b""), field(rand_value(rng)))
    if op == "ADD":
        return g1(op, field("h/cnt"), i64(rng.randint(-3, 1000)))
    return g1(op, keys(*[rand_key(rng) for _ in range(rng.randint(0, 5))]))


def hostile_length_frame(rng):
    op = rng.choice([G2["SET"], G2["MULTI_GET"], G2["MULTI_SET"], G2["APPEND"], G2["WAIT"]])
    return validate() + bytes([op]) + u64(rng.choice([2 ** 62, 2 ** 64 - 1, 300 * KiB, 1 << 31]))


def drain(s, seconds):
    s.settimeout(seconds)
    try:
        while s.recv(1 << 16):
            pass
    except OSError:
        pass


class Hostile(threading.Thread):
    def __init__(self, port, seed, stop):
        super().__init__(daemon=True)
        self.port, self.rng, self.stop = port, random.Random(seed), stop
        self.actions = 0

    def run(self):
        behaviours = [self.random_ops, self.random_ops, self.garbage, self.hostile_lengths, self.stall,
                      self.half_close, self.storm, self.watcher_not_reading, self.not_reading]
        while not self.stop.is_set():
            try:
                self.rng.choice(behaviours)()
            except OSError:
                pass  # the server closing a hostile connection is the expected outcome
            self.actions += 1

    def random_ops(self):
        with connect(self.port, timeout=5) as s:
            g2_conn = self.rng.random() < 0.7
            if g2_conn:
                s.sendall(validate())
            for _ in range(self.rng.randint(1, 20)):
                s.sendall(random_g2_request(self.rng) if g2_conn else random_g1_request(self.rng))
            drain(s, 0.2)

    def garbage(self):
        with connect(self.port, timeout=5) as s:
            s.sendall(os.urandom(self.rng.randint(1, 4096)))
            drain(s, 0.2)

    def hostile_lengths(self):
        with connect(self.port, timeout=5) as s:
            s.sendall(hostile_length_frame(self.rng))
            drain(s, 0.5)

    def stall(self):
        with connect(self.port, timeout=5) as s:
            partial = validate() + g2("SET", field(rand_key(self.rng)), u64(250 * KiB))
            s.sendall(partial + b"s" * self.rng.randint(4 * KiB, 240 * KiB))
            self.stop.wait(self.rng.uniform(0.5, 4))  # sometimes past the 2 s idle timeout

    def half_close(self):
        with connect(self.port, timeout=5) as s:
            s.sendall(validate() + g2("GET", field(rand_key(self.rng))) + g2("PING", u32(1)))
            s.shutdown(socket.SHUT_WR)
            drain(s, 1)

    def storm(self):
        for _ in range(50):
            s = socket.socket()
            if self.rng.random() < 0.5:  # close with RST
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            try:
                s.connect(("127.0.0.1", self.port))
                if self.rng.random() < 0.5:
                    s.sendall(validate() + g2("WAIT", keys("h/never")))
            finally:
                s.close()

    def watcher_not_reading(self):
        with connect(self.port, timeout=5) as w:
            w.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            key = rand_key(self.rng)
            w.sendall(b"".join(g1("WATCH_KEY", field(key)) for _ in range(self.rng.randint(1, 50))))
            with connect(self.port, timeout=5) as s:
                s.sendall(validate())
                for _ in range(30):
                    s.sendall(g2("SET", field(key), field(b"w" * (200 * KiB))))
            self.stop.wait(self.rng.uniform(0.5, 3))

    def not_reading(self):
        with connect(self.port, timeout=5) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            key = rand_key(self.rng)
            s.sendall(validate() + g2("SET", field(key), field(b"n" * (200 * KiB))))
            for _ in range(40):
                s.sendall(g2("GET", field(key)))
            self.stop.wait(self.rng.uniform(0.5, 3))


def main():
    store_bin, seconds, pythons = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    args = [str(x) for kv in LIMITS.items() for x in kv] + ["--idle-timeout", "2"]
    honest_script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "honest_client.py")
    with store(store_bin, *args) as (proc, port, read_log):
        stop = threading.Event()
        hostiles = [Hostile(port, seed, stop) for seed in range(HOSTILE_THREADS)]
        for h in hostiles:
            h.start()
        # Two honest clients per interpreter; client 0 of each also waits, past the idle timeout,
        # for client 0 of the next interpreter (a cycle, so a 1.13 and a 2.x client wait on each other).
        names = [f"{g}-{os.path.basename(py)}-{j}" for g, py in enumerate(pythons) for j in range(2)]
        argvs = []
        for g, py in enumerate(pythons):
            for j in range(2):
                peer = [names[(2 * g + 2) % len(names)]] if j == 0 else []
                argvs.append([py, honest_script, str(port), names[2 * g + j], str(seconds)] + peer)
        honest = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for a in argvs]
        peak_rss = 0
        try:
            while any(p.poll() is None for p in honest):
                if proc.poll() is not None:
                    raise AssertionError(f"ddprun-store died (exit {proc.returncode}): {read_log()[-2000:]}")
                peak_rss = max(peak_rss, proc_status(proc.pid, "VmRSS"))
                time.sleep(0.2)
        finally:
            stop.set()
            for p in honest:
                if p.poll() is None:
                    p.kill()
        outputs = [p.communicate()[0].strip() for p in honest]
        for h in hostiles:
            h.join(timeout=10)
        failures = [o for p, o in zip(honest, outputs) if p.returncode != 0]
        for o in outputs:
            print(o)
        hwm = proc_status(proc.pid, "VmHWM") * KiB
        log = read_log()
        closed = log.count("closing connection")
        print(f"hostile actions: {sum(h.actions for h in hostiles)}; connections closed for cause (logged): {closed}")
        print(f"server peak RSS {hwm / MiB:.1f} MiB; caps {CAPPED / MiB:.0f} MiB + fixed overhead "
              f"{FIXED_OVERHEAD / MiB:.0f} MiB")
        if failures:
            raise AssertionError("honest clients failed:\n" + "\n".join(failures) + "\n" + log[-3000:])
        if proc.poll() is not None:
            raise AssertionError(f"ddprun-store died (exit {proc.returncode})")
        if hwm > CAPPED + FIXED_OVERHEAD:
            raise AssertionError(f"peak RSS {hwm} bytes over the caps plus overhead")
        for expected in ("exceeds the reply limit", "no progress on a request or reply", "unknown G"):
            if expected not in log:
                raise AssertionError(f"the soak never triggered '{expected}'; log tail:\n{log[-3000:]}")
    print("store soak: OK")


if __name__ == "__main__":
    main()
