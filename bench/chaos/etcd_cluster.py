# SPDX-License-Identifier: MIT
"""A real 3-member etcd cluster for the chaos harness: members on free ports of one address (in
the bridge namespace, or on loopback), data in a temp dir, killed, stopped and restarted by the
faults; stopped for good by close(). The agents reach each member through a front
(etcd_front.py) that the member faults switch to a black hole or to HTTP 503 for a while; the
harness's own etcdctl calls go to the members directly."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def _free_ports(addr, n, prefix):
    # Bound on the address inside the namespace when there is one: ask the kernel there.
    if prefix:
        code = ("import socket;s=[socket.socket() for _ in range(%d)];"
                "[x.bind(('%s',0)) for x in s];print(' '.join(str(x.getsockname()[1]) for x in s))"
                % (n, addr))
        out = subprocess.run([*prefix, "python3", "-c", code], capture_output=True, text=True,
                             check=True).stdout
        return [int(p) for p in out.split()]
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind((addr, 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class EtcdCluster:
    def __init__(self, addr, prefix=(), members=3):
        self.addr, self.prefix = addr, list(prefix)
        self.dir = tempfile.mkdtemp(prefix="ddprun_chaos_etcd_")
        ports = _free_ports(addr, 3 * members, self.prefix)
        self.client = ports[:members]
        self.peer = ports[members:2 * members]
        self.front = ports[2 * members:]
        self.names = [f"e{k}" for k in range(members)]
        self.initial = ",".join(f"{n}=http://{addr}:{p}" for n, p in zip(self.names, self.peer))
        self.procs = [None] * members
        self.fronts = []
        for k in range(members):
            self.set_front(k, "pass")
            self.fronts.append(subprocess.Popen(
                [*self.prefix, "python3", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "etcd_front.py"),
                 addr, str(self.front[k]), addr, str(self.client[k]), self._mode_file(k)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        for k in range(members):
            self.start(k, state="new")
        self.wait_healthy(30)

    @property
    def endpoints(self):
        """What the agents are given: the members' fronts."""
        return ",".join(f"{self.addr}:{p}" for p in self.front)

    @property
    def direct(self):
        return ",".join(f"{self.addr}:{p}" for p in self.client)

    def _mode_file(self, k):
        return os.path.join(self.dir, f"front{k}.mode")

    def set_front(self, k, mode):
        """pass, hole (accepts, never answers) or 503, for member k's front."""
        with open(self._mode_file(k) + ".tmp", "w") as f:
            f.write(mode)
        os.replace(self._mode_file(k) + ".tmp", self._mode_file(k))

    def start(self, k, state="existing"):
        log = open(os.path.join(self.dir, f"{self.names[k]}.log"), "a")
        self.procs[k] = subprocess.Popen(
            [*self.prefix, "etcd", "--name", self.names[k],
             "--data-dir", os.path.join(self.dir, self.names[k]),
             "--listen-client-urls", f"http://{self.addr}:{self.client[k]}",
             "--advertise-client-urls", f"http://{self.addr}:{self.client[k]}",
             "--listen-peer-urls", f"http://{self.addr}:{self.peer[k]}",
             "--initial-advertise-peer-urls", f"http://{self.addr}:{self.peer[k]}",
             "--initial-cluster", self.initial, "--initial-cluster-state", state,
             "--heartbeat-interval", "100", "--election-timeout", "1000"],
            stdout=log, stderr=log, start_new_session=True)
        log.close()

    def alive(self, k):
        return self.procs[k] is not None and self.procs[k].poll() is None

    def signal(self, k, sig):
        if self.alive(k):
            os.kill(self.procs[k].pid, sig)

    def kill(self, k):
        self.signal(k, signal.SIGKILL)
        if self.procs[k]:
            self.procs[k].wait()

    def ctl(self, *args, timeout=5):
        env = dict(os.environ, ETCDCTL_API="3")
        return subprocess.run([*self.prefix, "etcdctl", "--endpoints", self.direct,
                               "--dial-timeout", "1s", "--command-timeout", f"{timeout}s", *args],
                              capture_output=True, text=True, env=env, timeout=timeout + 5)

    def leader(self):
        """Index of the current leader, or None."""
        try:
            out = self.ctl("endpoint", "status", "-w", "json").stdout
            for st in json.loads(out or "[]"):
                if st["Status"]["leader"] == st["Status"]["header"]["member_id"]:
                    port = int(st["Endpoint"].rsplit(":", 1)[1])
                    return self.client.index(port)
        except (ValueError, KeyError, subprocess.TimeoutExpired):
            pass
        return None

    def wait_healthy(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.ctl("endpoint", "health").returncode == 0:
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"etcd cluster not healthy after {timeout}s (logs in {self.dir})")

    def close(self):
        for front in self.fronts:
            front.kill()
            front.wait()
        for k in range(len(self.procs)):
            if self.procs[k] is not None:
                self.signal(k, signal.SIGCONT)
                self.kill(k)
        shutil.rmtree(self.dir, ignore_errors=True)
