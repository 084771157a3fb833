"""Standby store (`ddprun-store --follow`) with real processes and real PyTorch clients.

  python3 standby_test.py STORE_BIN

1. failover: torch 2.x (python3) and torch 1.13 (/usr/bin/python3, when it has torch) clients
   write to a primary with a standby; the primary is killed (SIGKILL) mid-stream; the standby,
   promoted through itself, holds every write a client saw acknowledged. Prints the failover time
   (kill -> promoted standby served a GET); not asserted.
2. standby role: before promotion it answers PING but refuses anything else (closes), cannot be
   followed, and a second promotion does not change the epoch.
   With the token it answers no read either (LIST_KEYS, GET_NUM_KEYS, GET, CHECK), to a stranger
   or to a client that proved the token; a fenced primary neither.
3. fencing: a primary that was paused (SIGSTOP) while its standby was promoted refuses every
   request once it runs again.
4. bound: a follower that never reads is dropped at --max-follower-lag-bytes with a log line; the
   primary's memory stays bounded and it keeps serving.
5. `--follow` to nothing: exit 1 with one line.
6. the job's token (DDPRUN_RDZV_TOKEN) protects replication: a standby without it or with a wrong
   one is refused by its primary (exit 1, one line), one with it follows; a stranger (raw socket,
   no token) can neither subscribe, nor promote the standby, nor fence the primary; a client that
   proves the token (HMAC-SHA256 challenge-response, as agents do) promotes it.
7. queues: items pushed before the standby subscribed are in its snapshot (after the keys, each
   queue head first); the promoted standby pops them, then those pushed later, in order.
8. synchronous replication: while the standby is paused (SIGSTOP) the primary answers nothing that
   could reveal a write the standby lacks (a SET's following PING, another client's GET); the
   replies come once it runs again. A standby paused past --follower-ack-timeout is dropped (log
   line) and the primary answers again; told so, the standby then refuses promotion. 10000 pipelined SETs acknowledged by one PING, then the
   primary SIGKILLed: the promoted standby holds all of them (3 rounds).
9. a standby paused until its primary dropped it for lag (--max-follower-lag-bytes) is told once it
   runs again (the frames it was owed, then the notice) and refuses promotion.
"""
import hashlib
import hmac
import os
import signal
import socket
import struct
import json
import subprocess
import sys
import threading
import time

G2_PY = "python3"
G1_PY = "/usr/bin/python3"

CLIENT = r"""
import datetime, sys
from torch.distributed import TCPStore
port = int(sys.argv[1])
s = TCPStore("127.0.0.1", port, 1, False, datetime.timedelta(seconds=10), wait_for_workers=False)
"""

WRITER = CLIENT + r"""
tag = sys.argv[2]
i = 0
while True:
    try:
        s.set(f"{tag}/{i}", f"v{i}")
        n = s.add(f"{tag}/count", 1)
    except Exception:
        break
    # Both the SET and the ADD are acknowledged once the ADD's reply is here.
    print(f"ACK {i} {n}", flush=True)
    i += 1
"""

# Connected to the standby before the kill (torch imported, handshake done), so the figure is
# the store's failover, not Python's start-up: reads the kill time, promotes, writes and reads.
PROMOTE_AND_CHECK = CLIENT + r"""
import json, time
print("READY", flush=True)
t0 = float(sys.stdin.readline())
epoch = s.compare_set("ddprun.replication/promote", "", "2")
s.set("after-promotion", "1")
served = s.get("after-promotion")
t1 = time.time()
acked = json.loads(sys.stdin.read())
missing = []
for tag, (last_i, last_n) in acked.items():
    for i in range(last_i + 1):
        if s.get(f"{tag}/{i}") != f"v{i}".encode():
            missing.append(f"{tag}/{i}")
    count = s.add(f"{tag}/count", 0)
    if count < last_n:
        missing.append(f"{tag}/count={count}<{last_n}")
print(json.dumps({"epoch": epoch.decode(), "failover_s": t1 - t0, "missing": missing[:10]}))
"""


def has_torch(py):
    try:
        return subprocess.run([py, "-c", "import torch"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class Store:
    def __init__(self, store_bin, *args, env=None):
        self.proc = subprocess.Popen([store_bin, "--port", "0", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        # Its log, read as it comes (wait_log), so that a chatty store never blocks on the pipe.
        self.lines = []
        self.log_changed = threading.Condition()
        self.reader = threading.Thread(target=self._read_log, daemon=True)
        self.reader.start()
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.proc.wait(10)
            self.reader.join(10)
        assert line.isdigit(), f"no port from {args}: {self.log()}"
        self.port = int(line)

    def _read_log(self):
        for line in self.proc.stderr:
            with self.log_changed:
                self.lines.append(line)
                self.log_changed.notify_all()

    def log(self):
        with self.log_changed:
            return "".join(self.lines)

    def wait_log(self, text, seconds):
        """Waits until a log line contains `text`; fails after `seconds` with the log."""
        with self.log_changed:
            found = self.log_changed.wait_for(lambda: any(text in l for l in self.lines), seconds)
        assert found, f"no log line with {text!r} within {seconds} s:\n{self.log()}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(10)
        return self.log()

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


def g2_frame(op, *fields):
    """A raw G2 request: op byte, then each field (bytes -> u64 length + bytes, int -> u32/i64)."""
    out = bytes([op])
    for f in fields:
        out += struct.pack("<Q", len(f)) + f
    return out


VALIDATE = bytes([0]) + struct.pack("<I", 0x3C85F7CE)
PING = bytes([13]) + struct.pack("<I", 7)


def raw_connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(VALIDATE + PING)
    assert s.recv(4) == struct.pack("<I", 7), "PING echo"
    return s


def closed_by_peer(sock):
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def wait_for(predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_failover(store_bin, writers_py):
    primary = Store(store_bin)
    standby = Store(store_bin, "--follow", f"127.0.0.1:{primary.port}")
    writers = {}
    try:
        for k, py in enumerate(writers_py):
            tag = f"w{k}-{'torch1.13' if py == G1_PY else 'torch2'}"
            writers[tag] = subprocess.Popen([py, "-c", WRITER, str(primary.port), tag], stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, text=True)
        # Let every writer get some acknowledged writes in, then kill the primary mid-stream.
        acked = {tag: (-1, 0) for tag in writers}
        first = {tag: w.stdout.readline() for tag, w in writers.items()}
        assert all(line.startswith("ACK") for line in first.values()), first
        promoter = subprocess.Popen([writers_py[0], "-c", PROMOTE_AND_CHECK, str(standby.port)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert promoter.stdout.readline().strip() == "READY"
        primary.proc.send_signal(signal.SIGKILL)
        t_kill = time.time()
        primary.proc.wait()
        promoter.stdin.write(f"{t_kill}\n")
        promoter.stdin.flush()
        for tag, w in writers.items():
            out, _ = w.communicate(timeout=60)
            for line in (first[tag] + out).splitlines():
                if line.startswith("ACK"):
                    _, i, n = line.split()
                    acked[tag] = (int(i), int(n))
        assert all(i >= 0 for i, _ in acked.values()), acked
        out, err = promoter.communicate(json.dumps(acked), timeout=120)
        assert promoter.returncode == 0, err[-2000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["epoch"] == "2", result
        assert not result["missing"], f"acknowledged writes lost in failover: {result['missing']}"
        total = sum(i + 1 for i, _ in acked.values())
        print(f"failover: {total} acknowledged SET+ADD pairs from {len(writers)} clients "
              f"({', '.join(sorted(acked))}) all on the promoted standby; "
              f"kill -> promoted and serving: {result['failover_s'] * 1000:.0f} ms")
    finally:
        for w in writers.values():
            if w.poll() is None:
                w.kill()
                w.wait()
        primary.stop()
        log = standby.stop()
    assert "promoted to primary at epoch 2" in log, log


def test_standby_role(store_bin):
    primary = Store(store_bin)
    standby = Store(store_bin, "--follow", f"127.0.0.1:{primary.port}")
    try:
        # PING is answered; a SET is refused (connection closed); GET of anything too.
        s = raw_connect(standby.port)
        s.sendall(g2_frame(1, b"/k", b"v"))
        assert closed_by_peer(s), "a standby must refuse SET"
        s.close()
        # Cannot be followed.
        s = raw_connect(standby.port)
        s.sendall(g2_frame(3, b"/ddprun.replication/follow"))
        assert closed_by_peer(s), "a standby must refuse followers"
        s.close()
        s = raw_connect(standby.port)
        s.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"1"))
        # Still a standby: epoch 1 is not above the primary's; the reply names the epoch in force.
        reply = s.recv(64)
        assert reply[8:] == b"1", reply
        s.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"5"))
        assert s.recv(64)[8:] == b"5"
        s.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"9"))
        assert s.recv(64)[8:] == b"5", "one promotion: a later proposal learns the winner's epoch"
        s.sendall(g2_frame(1, b"/k", b"v") + g2_frame(3, b"/k"))
        assert s.recv(64) == struct.pack("<Q", 1) + b"v", "the promoted standby serves"
        s.close()
    finally:
        primary.stop()
        standby.stop()


def test_fencing(store_bin):
    primary = Store(store_bin)
    standby = Store(store_bin, "--follow", f"127.0.0.1:{primary.port}")
    try:
        c = raw_connect(primary.port)
        # The PING's echo says the SET before it was applied (and published) by the primary.
        c.sendall(g2_frame(1, b"/before", b"1") + PING)
        assert c.recv(4) == struct.pack("<I", 7)
        primary.proc.send_signal(signal.SIGSTOP)
        p = raw_connect(standby.port)
        p.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"2"))
        assert p.recv(64)[8:] == b"2"
        p.sendall(g2_frame(3, b"/before"))
        assert p.recv(64) == struct.pack("<Q", 1) + b"1", "the write made before the pause was replicated"
        primary.proc.send_signal(signal.SIGCONT)
        # Once it runs again it reads the fence and closes its clients; new ones are refused.
        assert closed_by_peer(c), "the old primary must drop its clients once fenced"

        def refused():
            s = socket.create_connection(("127.0.0.1", primary.port), timeout=10)
            s.sendall(VALIDATE + PING + g2_frame(1, b"/split", b"brain") + g2_frame(3, b"/split"))
            try:
                data = s.recv(64)
                more = s.recv(64) if data else b""
                return (data + more)[4:] == b""
            except ConnectionResetError:
                return True
            finally:
                s.close()
        wait_for(refused, "the old primary to refuse requests")
    finally:
        standby.stop()
        log = primary.stop()
    assert "fenced: a standby was promoted to epoch 2" in log, log


def test_slow_follower_is_dropped(store_bin):
    cap = 1 << 20
    primary = Store(store_bin, "--max-follower-lag-bytes", str(cap))
    try:
        f = socket.socket()
        f.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        f.connect(("127.0.0.1", primary.port))
        f.sendall(VALIDATE + PING + g2_frame(3, b"/ddprun.replication/follow"))  # and never read again
        rss0 = primary.rss_kib()
        w = socket.create_connection(("127.0.0.1", primary.port))
        w.sendall(VALIDATE + PING)
        assert w.recv(4)
        value = b"x" * (64 * 1024)
        for _ in range(1600):  # 100 MiB of mutations
            w.sendall(g2_frame(1, b"/big", value))
        w.sendall(g2_frame(4, b"/n") + struct.pack("<q", 1))  # ADD /n 1
        assert w.recv(8) == struct.pack("<q", 1), "the primary keeps serving"
        grew_mib = (primary.rss_kib() - rss0) / 1024
        assert grew_mib < 64, f"primary grew by {grew_mib:.0f} MiB for a follower that does not read"
        f.close()
        w.close()
    finally:
        log = primary.stop()
    assert "dropping it" in log and "--max-follower-lag-bytes" in log, log


TOKEN = "standby-test-token-7c1e"


def prove_token(sock, token):
    """The agents' handshake (rendezvous/token_auth.cpp): GET the challenge, GET the response."""
    sock.sendall(g2_frame(3, b"/ddprun-auth/challenge"))
    challenge = recv_value(sock)
    mac = hmac.new(token.encode(), b"ddprun store access\n" + challenge, hashlib.sha256).hexdigest()
    sock.sendall(g2_frame(3, b"/ddprun-auth/response/" + mac.encode()))
    assert recv_value(sock) == b"ok", "token refused"


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, f"closed after {len(out)} of {n} bytes"
        out += chunk
    return out


def recv_value(sock):
    (n,) = struct.unpack("<Q", recv_exact(sock, 8))
    return recv_exact(sock, n)


def test_token_protects_replication(store_bin):
    with_token = dict(os.environ, DDPRUN_RDZV_TOKEN=TOKEN)
    without = {k: v for k, v in os.environ.items() if k != "DDPRUN_RDZV_TOKEN"}
    primary = Store(store_bin, env=with_token)
    standby = None
    try:
        # A standby without the token, and one with a wrong token: refused, exit 1, one line.
        for env, why in ((without, "the job's token and this standby has none"),
                         (dict(os.environ, DDPRUN_RDZV_TOKEN="not-the-token"), "refused")):
            r = subprocess.run([store_bin, "--port", "0", "--follow", f"127.0.0.1:{primary.port}"],
                               capture_output=True, text=True, timeout=60, env=env)
            err = r.stderr.strip()
            assert r.returncode == 1 and r.stdout == "", (r.returncode, r.stdout, err)
            assert err.count("\n") == 0 and f"cannot follow 127.0.0.1:{primary.port}" in err, err
            assert why in err, err
        # A stranger cannot subscribe (which would stream every key, the rendezvous keys too).
        s = raw_connect(primary.port)
        s.sendall(g2_frame(3, b"/ddprun.replication/follow"))
        assert closed_by_peer(s), "a stranger must not subscribe to a primary with a token"
        s.close()
        # With the token the standby follows and replicates.
        c = raw_connect(primary.port)
        c.sendall(g2_frame(1, b"/before", b"1") + PING)
        assert recv_exact(c, 4) == struct.pack("<I", 7)
        standby = Store(store_bin, "--follow", f"127.0.0.1:{primary.port}", env=with_token)
        # A stranger can neither promote the standby...
        s = raw_connect(standby.port)
        s.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"2"))
        assert closed_by_peer(s), "a stranger must not promote the standby"
        s.close()
        # ...nor fence the primary (which would then refuse every request: the job would end).
        s = raw_connect(primary.port)
        s.sendall(g2_frame(1, b"/ddprun.replication/fence", b"9"))
        assert closed_by_peer(s), "a stranger must not fence the primary"
        s.close()
        c.sendall(g2_frame(3, b"/before"))
        assert recv_value(c) == b"1", "the primary still serves after the stranger's fence"
        # A client that proves the token promotes the standby, which fences the primary.
        p = raw_connect(standby.port)
        prove_token(p, TOKEN)
        p.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"2"))
        assert recv_value(p) == b"2"
        p.sendall(g2_frame(3, b"/before"))
        assert recv_value(p) == b"1", "the standby with the token replicated the primary"
        assert closed_by_peer(c), "the primary, fenced by its promoted standby, drops its clients"
        p.close()
    finally:
        standby_log = standby.stop() if standby else ""
        primary_log = primary.stop()
    assert "a standby's subscription without the job's token" in primary_log, primary_log
    assert "wrong rendezvous token" in primary_log, primary_log
    assert "a fence without the job's token" in primary_log, primary_log
    assert "fenced: a standby was promoted to epoch 2" in primary_log, primary_log
    assert "a promotion without the job's token" in standby_log, standby_log
    assert standby_log.count("promoted to primary at epoch 2") == 1, standby_log
    print("token: a standby without or with a wrong token refused (exit 1); strangers cannot "
          "subscribe, promote or fence; the token's holder promotes")


def answered_or_closed(sock, request):
    """Sends `request`; the reply's first bytes, or None when the peer closed the connection."""
    sock.sendall(request)
    try:
        data = sock.recv(64)
    except ConnectionResetError:
        return None
    return data or None


GET_NUM_KEYS, LIST_KEYS = bytes([7]), bytes([17])


def test_standby_reads_refused_whatever_was_proven(store_bin):
    # Before promotion a standby started with the token answers only VALIDATE, PING, the token's
    # proof and the promotion: no read of its possibly stale state, to a stranger (whose
    # LIST_KEYS / GET_NUM_KEYS the token policy would answer itself) or to a proven client. A
    # fenced primary refuses them too.
    env = dict(os.environ, DDPRUN_RDZV_TOKEN=TOKEN)
    primary = Store(store_bin, env=env)
    standby = None
    try:
        c = raw_connect(primary.port)
        c.sendall(g2_frame(1, b"/stale", b"1") + PING)
        assert recv_exact(c, 4) == struct.pack("<I", 7)
        standby = Store(store_bin, "--follow", f"127.0.0.1:{primary.port}", env=env)
        for proven in (False, True):
            for name, request in (("GET_NUM_KEYS", GET_NUM_KEYS), ("LIST_KEYS", LIST_KEYS),
                                  ("GET", g2_frame(3, b"/stale")), ("CHECK", struct.pack("<BQ", 5, 1) +
                                                                     struct.pack("<Q", 6) + b"/stale")):
                s = raw_connect(standby.port)
                if proven:
                    prove_token(s, TOKEN)
                got = answered_or_closed(s, request)
                assert got is None, f"the standby answered {name} ({got!r}) to a {'proven' if proven else 'stranger'}'s connection"
                s.close()
        # The proof and the promotion still work; then it serves.
        p = raw_connect(standby.port)
        prove_token(p, TOKEN)
        p.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"2"))
        assert recv_value(p) == b"2"
        assert answered_or_closed(p, GET_NUM_KEYS) == struct.pack("<q", 1), "the promoted standby serves"
        assert closed_by_peer(c), "the old primary is fenced"
        # A G1 connection (no VALIDATE, which a fenced store refuses) asks for GETNUMKEYS (6).
        s = socket.create_connection(("127.0.0.1", primary.port), timeout=10)
        got = answered_or_closed(s, bytes([6]))
        assert got is None, f"a fenced primary answered GETNUMKEYS ({got!r})"
        s.close()
        p.close()
    finally:
        standby_log = standby.stop() if standby else ""
        primary.stop()
    assert "it serves only after promotion" in standby_log, standby_log
    print("standby: no reads before promotion, to strangers or to proven clients; fenced: none")


def queue_pop(sock, queue):
    """QUEUE_POP (15): the item, or None when the queue was empty."""
    sock.sendall(g2_frame(15, queue))
    (length_before,) = struct.unpack("<q", recv_exact(sock, 8))
    return recv_value(sock) if length_before > 0 else None


def test_queues_in_the_snapshot(store_bin):
    # Items pushed (and some popped) before the standby subscribes reach it in the snapshot,
    # after the keys; items pushed later in the stream; the promoted standby pops them in order.
    primary = Store(store_bin)
    standby = None
    try:
        c = raw_connect(primary.port)
        for item in (b"a", b"b", b"c"):
            c.sendall(g2_frame(14, b"/jobs", item))  # QUEUE_PUSH: no reply
        c.sendall(g2_frame(14, b"/other", b"x") + g2_frame(1, b"/k", b"v"))
        assert queue_pop(c, b"/jobs") == b"a"
        standby = Store(store_bin, "--follow", f"127.0.0.1:{primary.port}")
        c.sendall(g2_frame(14, b"/jobs", b"d") + PING)
        assert recv_exact(c, 4) == struct.pack("<I", 7)
        p = raw_connect(standby.port)
        # The PING's echo came after the standby acknowledged d (synchronous replication).
        p.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"2"))
        assert recv_value(p) == b"2"
        p.sendall(g2_frame(16, b"/jobs"))  # QUEUE_LEN
        assert struct.unpack("<q", recv_exact(p, 8))[0] == 3
        assert [queue_pop(p, b"/jobs") for _ in range(4)] == [b"b", b"c", b"d", None]
        assert queue_pop(p, b"/other") == b"x"
        p.sendall(g2_frame(3, b"/k"))
        assert recv_value(p) == b"v"
        p.close()
        c.close()
    finally:
        standby_log = standby.stop() if standby else ""
        primary_log = primary.stop()
    assert "(1 keys and 3 queue items in the snapshot)" in primary_log, primary_log
    assert "promoted to primary at epoch 2" in standby_log, standby_log
    print("queues: items pushed before the standby subscribed reach it, in order, after promotion")


def answered_within(sock, n, seconds):
    """n bytes from sock within `seconds`, or None when nothing came in that time."""
    sock.settimeout(seconds)
    try:
        return recv_exact(sock, n)
    except socket.timeout:
        return None
    finally:
        sock.settimeout(10)


def promote(port):
    p = raw_connect(port)
    p.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"2"))
    assert recv_value(p) == b"2"
    return p


def test_replies_wait_for_the_standby(store_bin):
    primary = Store(store_bin, "--follower-ack-timeout", "120")
    standby = Store(store_bin, "--follow", f"127.0.0.1:{primary.port}")
    try:
        writer, reader = raw_connect(primary.port), raw_connect(primary.port)
        standby.proc.send_signal(signal.SIGSTOP)
        writer.sendall(g2_frame(1, b"/k", b"v") + PING)
        assert answered_within(writer, 4, 1.0) is None, "a write acknowledged before the standby had it"
        reader.sendall(g2_frame(3, b"/k"))
        assert answered_within(reader, 9, 0.3) is None, "a read revealed a write the standby lacks"
        standby.proc.send_signal(signal.SIGCONT)
        assert answered_within(writer, 4, 30) == struct.pack("<I", 7)
        assert answered_within(reader, 9, 30) == struct.pack("<Q", 1) + b"v"
        # Every round: many writes acknowledged by one PING, then the primary killed at once.
        for round_ in range(3):
            writer.sendall(b"".join(g2_frame(1, b"/r%d/%d" % (round_, i), b"x" * 64) for i in range(10000)) + PING)
            assert answered_within(writer, 4, 60) == struct.pack("<I", 7)
            if round_ < 2:
                continue
            primary.proc.send_signal(signal.SIGKILL)
            primary.proc.wait()
            p = promote(standby.port)
            for r in range(3):
                for i in (0, 5000, 9999):
                    p.sendall(g2_frame(3, b"/r%d/%d" % (r, i)))
                    assert recv_value(p) == b"x" * 64, f"acknowledged write /r{r}/{i} lost"
            p.sendall(GET_NUM_KEYS)
            assert struct.unpack("<q", recv_exact(p, 8))[0] == 1 + 3 * 10000
            p.close()
        writer.close()
        reader.close()
    finally:
        standby_log = standby.stop()
        primary.stop()
    assert "promoted to primary at epoch 2" in standby_log, standby_log
    print("synchronous replication: replies wait for the standby; 3 x 10000 pipelined SETs all on it after SIGKILL")


def test_stalled_standby_is_dropped(store_bin):
    primary = Store(store_bin, "--follower-ack-timeout", "0.3")
    standby = Store(store_bin, "--follow", f"127.0.0.1:{primary.port}")
    try:
        c = raw_connect(primary.port)
        standby.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        c.sendall(g2_frame(1, b"/k", b"v") + PING)
        assert answered_within(c, 4, 30) == struct.pack("<I", 7), "the primary must answer once it drops the standby"
        waited = time.monotonic() - t0
        assert waited >= 0.25, f"answered after {waited:.3f} s, before --follower-ack-timeout"
        c.sendall(g2_frame(1, b"/k2", b"v") + PING)  # no standby now: answered at once
        assert answered_within(c, 4, 30) == struct.pack("<I", 7)
        c.close()
        # The primary told the standby it was dropped: running again, it refuses promotion (it
        # lacks /k2, which a client saw acknowledged) and answers the epoch in force, 1.
        standby.proc.send_signal(signal.SIGCONT)
        p = raw_connect(standby.port)
        p.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"2"))
        assert recv_value(p) == b"1", "a dropped standby must not be promoted"
        p.close()
    finally:
        standby_log = standby.stop()
        log = primary.stop()
    assert "did not acknowledge" in log and "--follower-ack-timeout" in log, log
    assert "the primary dropped this standby" in standby_log and "refusing promotion" in standby_log, standby_log
    print(f"stalled standby: dropped after {waited:.2f} s (--follower-ack-timeout 0.3); the primary answers again")


def test_lagging_standby_is_told(store_bin):
    # A standby dropped for lag while paused gets what it was owed and then the notice once it
    # runs again (within the primary's 10 s drain time): it then refuses promotion, since it
    # lacks writes a client saw acknowledged after the drop.
    primary = Store(store_bin, "--max-follower-lag-bytes", str(1 << 20), "--follower-ack-timeout", "120")
    standby = Store(store_bin, "--follow", f"127.0.0.1:{primary.port}")
    try:
        standby.wait_log("standby: following", 30)
        standby.proc.send_signal(signal.SIGSTOP)
        w = raw_connect(primary.port)
        value = b"x" * (64 * 1024)
        for _ in range(800):  # 50 MiB: past the kernel's buffers and the 1 MiB bound
            w.sendall(g2_frame(1, b"/big", value))
        w.sendall(g2_frame(4, b"/n") + struct.pack("<q", 1))  # ADD /n 1
        assert answered_within(w, 8, 30) == struct.pack("<q", 1), "nothing waits for a dropped standby"
        primary.wait_log("bytes behind", 30)
        standby.proc.send_signal(signal.SIGCONT)
        standby.wait_log("the primary dropped this standby", 30)
        p = raw_connect(standby.port)
        p.sendall(g2_frame(2, b"/ddprun.replication/promote", b"", b"2"))
        assert recv_value(p) == b"1", "a dropped standby must not be promoted"
        p.close()
        w.close()
    finally:
        standby_log = standby.stop()
        log = primary.stop()
    assert "--max-follower-lag-bytes" in log and "resetting it" not in log, log
    assert "refusing promotion" in standby_log, standby_log
    assert "sequence gap" not in standby_log and "connection reset" not in standby_log, standby_log


def test_follow_nothing(store_bin):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    r = subprocess.run([store_bin, "--port", "0", "--follow", f"127.0.0.1:{port}"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1, r.returncode
    err = r.stderr.strip()
    assert err.count("\n") == 0 and f"cannot follow 127.0.0.1:{port}" in err, err


def main():
    store_bin = sys.argv[1]
    if len(sys.argv) > 2:  # named cases only (debugging), e.g. test_standby_role
        for name in sys.argv[2:]:
            globals()[name](store_bin)
        return
    if not has_torch(G2_PY):
        print(f"skipped: {G2_PY} has no torch")
        sys.exit(77)
    writers = [G2_PY, G2_PY]
    if has_torch(G1_PY):
        writers.append(G1_PY)
    else:
        print(f"note: {G1_PY} has no torch; torch 1.13 writer skipped")
    test_follow_nothing(store_bin)
    test_standby_reads_refused_whatever_was_proven(store_bin)
    test_queues_in_the_snapshot(store_bin)
    test_token_protects_replication(store_bin)
    test_standby_role(store_bin)
    test_fencing(store_bin)
    test_slow_follower_is_dropped(store_bin)
    test_replies_wait_for_the_standby(store_bin)
    test_stalled_standby_is_dropped(store_bin)
    test_lagging_standby_is_told(store_bin)
    test_failover(store_bin, writers)
    print("standby store: OK")


if __name__ == "__main__":
    main()
