"""Raw TCPStore frames and a ddprun-store process for the bounds tests and the soak.

Only the standard library: these tests speak the wire protocol directly (hostile clients do
what no PyTorch client would), so they run with any python3.
"""
import contextlib
import os
import signal
import socket
import struct
import subprocess
import tempfile
import time

# Wire bytes (docs/protocol.md).
G1 = {"SET": 0, "COMPARE_SET": 1, "GET": 2, "ADD": 3, "CHECK": 4, "WAIT": 5, "GETNUMKEYS": 6, "WATCH_KEY": 7,
      "DELETE_KEY": 8}
G2 = {"VALIDATE": 0, "SET": 1, "COMPARE_SET": 2, "GET": 3, "ADD": 4, "CHECK": 5, "WAIT": 6, "GETNUMKEYS": 7,
      "DELETE_KEY": 8, "APPEND": 9, "MULTI_GET": 10, "MULTI_SET": 11, "CANCEL_WAIT": 12, "PING": 13,
      "QUEUE_PUSH": 14, "QUEUE_POP": 15, "QUEUE_LEN": 16, "LIST_KEYS": 17, "BARRIER": 18}
VALIDATE_MAGIC = 0x3C85F7CE


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def i64(v):
    return struct.pack("<q", v)


def field(b):
    if isinstance(b, str):
        b = b.encode()
    return u64(len(b)) + b


def validate():
    return bytes([G2["VALIDATE"]]) + u32(VALIDATE_MAGIC)


def g2(op, *parts):
    return bytes([G2[op]]) + b"".join(parts)


def g1(op, *parts):
    return bytes([G1[op]]) + b"".join(parts)


def keys(*ks):
    return u64(len(ks)) + b"".join(field(k) for k in ks)


def connect(port, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s, n):
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def recv_field(s):
    (n,) = struct.unpack("<Q", recv_exact(s, 8))
    return recv_exact(s, n)


def is_closed_by_peer(s, timeout=30):
    """True when the server closes the connection (EOF or reset) within timeout, reading and
    discarding anything it still sends."""
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(1 << 20):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


class G2Client:
    """A well-behaved G2 connection (VALIDATE + PING handshake), for checking the server still serves."""

    def __init__(self, port, timeout=30):
        self.s = connect(port, timeout)
        self.s.sendall(validate() + g2("PING", u32(7)))
        assert recv_exact(self.s, 4) == u32(7), "PING reply"

    def set(self, k, v):
        self.s.sendall(g2("SET", field(k), field(v)))

    def get(self, k):
        self.s.sendall(g2("GET", field(k)))
        return recv_field(self.s)

    def ping(self, word=1):
        self.s.sendall(g2("PING", u32(word)))
        return recv_exact(self.s, 4) == u32(word)

    def close(self):
        self.s.close()


def proc_status(pid, name):
    """A /proc/PID/status figure in KiB (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise KeyError(name)


def proc_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def store(store_bin, *args, preexec_fn=None):
    """ddprun-store on 127.0.0.1 port 0, stderr in a file. Yields (proc, port, read_log)."""
    log = tempfile.NamedTemporaryFile(prefix="ddprun-store-bounds-", suffix=".log", delete=False)
    proc = subprocess.Popen([store_bin, "--host", "127.0.0.1", "--port", "0", *args], stdout=subprocess.PIPE,
                            stderr=log, text=True, preexec_fn=preexec_fn)
    try:
        line = proc.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"ddprun-store did not start (stdout {line!r}, exit {proc.poll()}): "
                               f"{open(log.name).read()[-2000:]}")

        def read_log():
            with open(log.name) as f:
                return f.read()

        yield proc, int(line), read_log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        os.unlink(log.name)


def wait_until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {what}")
