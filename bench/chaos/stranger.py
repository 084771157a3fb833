# SPDX-License-Identifier: MIT
"""A stranger without the token: garbage and valid-looking requests to a store or a status port.
Usage: stranger.py store|status HOST:PORT SEED. Bounded: a few connections, each closed within
seconds; prints what each attempt got, never fails on what the server does."""
import random
import socket
import struct
import sys


def send(addr, payload, read=True):
    host, port = addr.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2) as s:
            s.sendall(payload)
            if read:
                try:
                    return s.recv(4096)
                except socket.timeout:
                    return b"(no answer)"
    except OSError as e:
        return f"({e})".encode()
    return b""


def frame_string(b):
    return struct.pack("<Q", len(b)) + b


def main():
    what, addr, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    tries = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 512))) for _ in range(3)]
    if what == "store":
        # torch's validation handshake (VALIDATE, magic), then SETs of the job's own keys and a
        # huge length prefix: each must be refused or bounded, never obeyed.
        validate = bytes([0]) + struct.pack("<I", 0x3C85F7CE)
        tries += [
            validate + bytes([1]) + frame_string(b"/ddprun/rdzv/round") + frame_string(b"x"),
            validate + bytes([1]) + frame_string(b"/ddprun/stop") + frame_string(b"stranger"),
            validate + bytes([1]) + struct.pack("<Q", 1 << 62),
        ]
    else:
        tries += [b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n",
                  b"POST /status HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n" + b"a" * 1000,
                  b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n"]
    for payload in tries:
        print(repr(send(addr, payload)[:80]))


if __name__ == "__main__":
    main()
