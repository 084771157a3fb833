"""A raw c10d TCPStore client for tests: both protocol generations, pipelining, exact bytes.

Only for tests that need what PyTorch's client cannot do (several requests in one segment,
timestamps around each request); the real clients are tested separately."""
import socket
import struct

OPS = {
    "G1": {"set": 0, "compare_set": 1, "get": 2, "add": 3, "check": 4, "wait": 5, "num_keys": 6, "delete": 8},
    "G2": {"validate": 0, "set": 1, "compare_set": 2, "get": 3, "add": 4, "check": 5, "wait": 6, "num_keys": 7,
           "delete": 8, "append": 9, "multi_get": 10, "multi_set": 11, "cancel_wait": 12, "ping": 13},
}
NO_REPLY = {"set", "append", "multi_set", "validate"}


def _b(data):
    data = data if isinstance(data, bytes) else data.encode()
    return struct.pack("<Q", len(data)) + data


def encode(gen, op, *args):
    """One request. args: key / (key, value) / (key, expected, desired) / (key, delta) / ([keys])."""
    out = bytes([OPS[gen][op]])
    if op in ("set", "append"):
        out += _b(args[0]) + _b(args[1])
    elif op == "compare_set":
        out += _b(args[0]) + _b(args[1]) + _b(args[2])
    elif op in ("get", "delete"):
        out += _b(args[0])
    elif op == "add":
        out += _b(args[0]) + struct.pack("<q", args[1])
    elif op in ("check", "wait", "multi_get"):
        out += struct.pack("<Q", len(args[0])) + b"".join(_b(k) for k in args[0])
    elif op == "ping":
        out += struct.pack("<I", args[0])
    return out


class WireClient:
    def __init__(self, port, gen="G2", timeout=60.0):
        self.gen = gen
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        if gen == "G2":
            self.sock.sendall(bytes([0]) + struct.pack("<I", 0x3C85F7CE))

    def close(self):
        self.sock.close()

    def send(self, *requests):
        self.sock.sendall(b"".join(requests))

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by the peer")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_byte(self):
        return self._need(1)[0]

    def read_i64(self):
        return struct.unpack("<q", self._need(8))[0]

    def read_bytes(self):
        return self._need(struct.unpack("<Q", self._need(8))[0])

    def read_reply(self, op, nkeys=1):
        if op in NO_REPLY:
            return None
        if op in ("get", "compare_set"):
            return self.read_bytes()
        if op in ("add", "delete", "num_keys"):
            return self.read_i64()
        if op in ("check", "wait", "cancel_wait"):
            return self.read_byte()
        if op == "multi_get":
            return [self.read_bytes() for _ in range(nkeys)]
        if op == "ping":
            return struct.unpack("<I", self._need(4))[0]
        raise ValueError(op)

    def call(self, op, *args):
        self.send(encode(self.gen, op, *args))
        return self.read_reply(op, len(args[0]) if op in ("check", "wait", "multi_get") else 1)
