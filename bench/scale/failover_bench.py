#!/usr/bin/env python3
"""Failover time of the standby store: primary SIGKILLed -> standby promoted and serving.

  python3 bench/scale/failover_bench.py --build build [--rounds 5] [--keys 10000]

Each round: a fresh primary and standby (`--follow`), both given the job's token
(DDPRUN_RDZV_TOKEN, a fresh random one per run) as in a job: the standby proves it to subscribe,
and only a connection that proved it may promote (docs/rendezvous.md, "The token"). A raw G2
client (a worker: no token) writes --keys SETs and a PING (echo = all applied); a second client
is already connected to the standby and has proved the token (as an agent's connection has); the
primary is SIGKILLed; the second client promotes the standby (COMPARE_SET of the promote key) and
GETs the last key written. Reported: kill -> promotion answered, and kill -> the GET answered, median and
max over the rounds. Detection of the loss (the agents' heartbeat timeout) is not included.
"""
import argparse
import hashlib
import hmac
import os
import secrets
import signal
import socket
import statistics
import struct
import subprocess
import time

VALIDATE = bytes([0]) + struct.pack("<I", 0x3C85F7CE)
PING = bytes([13]) + struct.pack("<I", 7)


def frame(op, *fields):
    out = bytes([op])
    for f in fields:
        out += struct.pack("<Q", len(f)) + f
    return out


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise RuntimeError("connection closed")
        data += chunk
    return data


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(VALIDATE + PING)
    recv_exact(s, 4)
    return s


def recv_value(s):
    (n,) = struct.unpack("<Q", recv_exact(s, 8))
    return recv_exact(s, n)


def prove_token(s, token):
    """The agents' handshake (rendezvous/token_auth.cpp): GET the challenge, GET the response."""
    s.sendall(frame(3, b"/ddprun-auth/challenge"))
    challenge = recv_value(s)
    mac = hmac.new(token.encode(), b"ddprun store access\n" + challenge, hashlib.sha256).hexdigest()
    s.sendall(frame(3, b"/ddprun-auth/response/" + mac.encode()))
    if recv_value(s) != b"ok":
        raise RuntimeError("the standby refused the token")


def start(binary, token, *args):
    env = dict(os.environ, DDPRUN_RDZV_TOKEN=token)
    p = subprocess.Popen([binary, "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, env=env)
    line = p.stdout.readline()
    if not line.strip().isdigit():
        p.kill()
        p.wait()
        raise RuntimeError(f"{binary} {' '.join(args)} did not start (exit {p.returncode})")
    return p, int(line)


def one_round(binary, keys, token):
    primary, pport = start(binary, token)
    standby, sport = start(binary, token, "--follow", f"127.0.0.1:{pport}")
    try:
        w = connect(pport)
        w.sendall(b"".join(frame(1, f"/k{i}".encode(), b"v" * 64) for i in range(keys)) + PING)
        recv_exact(w, 4)
        c = connect(sport)
        prove_token(c, token)
        primary.send_signal(signal.SIGKILL)
        t0 = time.perf_counter()
        c.sendall(frame(2, b"/ddprun.replication/promote", b"", b"2"))
        assert recv_exact(c, 9)[8:] == b"2"
        t1 = time.perf_counter()
        last = f"/k{keys - 1}".encode()
        # An absent key gets no answer (GET of a missing key): the timeout says the write was lost.
        c.sendall(frame(3, last))
        try:
            assert recv_exact(c, 8 + 64)[8:] == b"v" * 64
        except TimeoutError:
            return t1 - t0, None
        t2 = time.perf_counter()
        return t1 - t0, t2 - t0
    finally:
        for p in (primary, standby):
            if p.poll() is None:
                p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keys", type=int, default=1000)
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "ddprun-store")
    token = secrets.token_hex(16)
    promote, serve = zip(*(one_round(binary, args.keys, token) for _ in range(args.rounds)))
    lost = sum(1 for x in serve if x is None)
    serve = [x for x in serve if x is not None] or [float("nan")]
    ms = lambda xs: f"median {statistics.median(xs) * 1000:.2f} ms, max {max(xs) * 1000:.2f} ms"
    print(f"{args.rounds} rounds, {args.keys} keys replicated, token on both stores (proved before the "
          f"kill); load average {os.getloadavg()[0]:.1f}")
    print(f"kill -> promoted:             {ms(promote)}")
    print(f"kill -> serving (GET answered): {ms(serve)}")
    if lost:
        print(f"rounds where the last acknowledged write was missing on the standby: {lost} (see docs/scale.md)")


if __name__ == "__main__":
    main()
