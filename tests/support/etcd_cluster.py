"""A real etcd cluster for tests: N members on free loopback ports, data in a temp dir.

    with EtcdCluster(3) as cluster:
        cluster.endpoints          # "127.0.0.1:C0,127.0.0.1:C1,127.0.0.1:C2"
        cluster.leader()           # index of the current leader
        cluster.kill(i); cluster.restart(i)

Every member is stopped (SIGKILL) and the temp dir removed at exit.
`EtcdCluster(3, tls=make_pki(dir))` serves its clients over TLS (https://) with certificates from a
test CA, and asks clients for a certificate of that CA when `client_auth` is set.
`require_etcd()` exits 77 (CTest: skipped) when the etcd binary is not installed.
"""
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def require_etcd():
    if not os.path.exists(ETCD):
        print("SKIP: etcd is not installed (Debian: etcd-server)")
        sys.exit(77)


def free_ports(n):
    """n distinct free loopback ports (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def post(endpoint, path, body, timeout=2.0, context=None):
    scheme = "https" if context else "http"
    req = urllib.request.Request(f"{scheme}://{endpoint}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
        return json.loads(r.read())


def make_pki(directory, name="ca"):
    """A test CA (EC P-256, 2 days) and, signed by it, a certificate for 127.0.0.1 (server and
    client use): {"ca", "cert", "key"} paths under `directory`, with the `name` prefix."""
    os.makedirs(directory, exist_ok=True)
    f = {k: os.path.join(directory, f"{name}-{k}") for k in ("ca.pem", "ca.key", "cert.pem",
                                                            "cert.key", "cert.csr", "ext")}
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    quiet = {"check": True, "capture_output": True}
    subprocess.run(["openssl", "req", "-x509", *ec, "-keyout", f["ca.key"], "-out", f["ca.pem"],
                    "-days", "2", "-subj", f"/CN=ddprun test {name}"], **quiet)
    subprocess.run(["openssl", "req", *ec, "-keyout", f["cert.key"], "-out", f["cert.csr"],
                    "-subj", "/CN=127.0.0.1"], **quiet)
    with open(f["ext"], "w") as out:
        out.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    subprocess.run(["openssl", "x509", "-req", "-in", f["cert.csr"], "-CA", f["ca.pem"], "-CAkey",
                    f["ca.key"], "-CAcreateserial", "-out", f["cert.pem"], "-days", "2",
                    "-extfile", f["ext"]], **quiet)
    return {"ca": f["ca.pem"], "cert": f["cert.pem"], "key": f["cert.key"]}


class EtcdCluster:
    def __init__(self, members=3, extra_args=(), tls=None, client_auth=False):
        require_etcd()
        self.n = members
        self.extra = list(extra_args)
        self.tls = tls
        self.scheme = "https" if tls else "http"
        self.context = None
        if tls:
            self.extra += ["--cert-file", tls["cert"], "--key-file", tls["key"]]
            self.context = ssl.create_default_context(cafile=tls["ca"])
            if client_auth:
                self.extra += ["--client-cert-auth", "--trusted-ca-file", tls["ca"]]
                self.context.load_cert_chain(tls["cert"], tls["key"])
        self.dir = tempfile.mkdtemp(prefix="ddprun-etcd-")
        ports = free_ports(2 * members)
        self.client_ports = ports[:members]
        self.peer_ports = ports[members:]
        self.procs = [None] * members
        self.initial = ",".join(f"e{i}=http://127.0.0.1:{p}" for i, p in enumerate(self.peer_ports))

    @property
    def endpoints(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    @property
    def urls(self):
        return ",".join(f"{self.scheme}://127.0.0.1:{p}" for p in self.client_ports)

    def post(self, i, path, body, timeout=1.0):
        return post(self.endpoint(i), path, body, timeout=timeout, context=self.context)

    def endpoint(self, i):
        return f"127.0.0.1:{self.client_ports[i]}"

    def start_member(self, i, state="new"):
        c, p = self.client_ports[i], self.peer_ports[i]
        log = open(os.path.join(self.dir, f"e{i}.log"), "ab")
        self.procs[i] = subprocess.Popen(
            [ETCD, "--name", f"e{i}", "--data-dir", os.path.join(self.dir, f"e{i}"),
             "--listen-client-urls", f"{self.scheme}://127.0.0.1:{c}",
             "--advertise-client-urls", f"{self.scheme}://127.0.0.1:{c}",
             "--listen-peer-urls", f"http://127.0.0.1:{p}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
             "--initial-cluster", self.initial, "--initial-cluster-state", state,
             "--initial-cluster-token", os.path.basename(self.dir)] + self.extra,
            stdout=log, stderr=subprocess.STDOUT)

    def start(self, timeout=30):
        for i in range(self.n):
            self.start_member(i)
        self.wait_healthy(timeout)
        return self

    def healthy(self, i):
        try:
            self.post(i, "/v3/kv/range", {"key": "aGVhbHRo"})
            return True
        except Exception:
            return False

    def wait_healthy(self, timeout=30, members=None):
        members = range(self.n) if members is None else members
        deadline = time.time() + timeout
        while time.time() < deadline:
            if all(self.healthy(i) for i in members if self.procs[i] and self.procs[i].poll() is None):
                return
            time.sleep(0.2)
        raise RuntimeError(f"etcd cluster not healthy within {timeout} s (logs in {self.dir})")

    def leader(self):
        """Index of the member that is leader (asked of any live member)."""
        for i in range(self.n):
            if not self.procs[i] or self.procs[i].poll() is not None:
                continue
            try:
                st = self.post(i, "/v3/maintenance/status", {})
                lead = int(st["leader"])
                for j in range(self.n):
                    if not self.procs[j] or self.procs[j].poll() is not None:
                        continue
                    sj = self.post(j, "/v3/maintenance/status", {})
                    if int(sj["header"]["member_id"]) == lead:
                        return j
            except Exception:
                continue
        return None

    def kill(self, i, sig=signal.SIGKILL):
        p = self.procs[i]
        if p and p.poll() is None:
            p.send_signal(sig)
            p.wait(timeout=10)

    def restart(self, i):
        self.start_member(i, state="existing")

    def stop(self):
        # SIGKILL at once: the data dir goes with them (a SIGTERMed member hands its leadership
        # over first, which costs seconds per test).
        for p in self.procs:
            if p and p.poll() is None:
                p.kill()
        for p in self.procs:
            if p:
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
