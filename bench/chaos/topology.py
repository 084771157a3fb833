# SPDX-License-Identifier: MIT
"""Where the chaos job's nodes live: K network namespaces on one bridge (root and `ip` needed),
or, when that is not possible, K addresses 127.0.0.N on this machine's loopback (no link cuts)."""
import os
import subprocess


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class Netns:
    kind = "netns"

    def __init__(self, nodes):
        tag = f"{os.getpid() % 100000}"
        self.ns = [f"ddpch{tag}n{k}" for k in range(nodes)]
        self.bridge_ns = f"ddpch{tag}br"
        self.veth = [f"ch{tag}n{k}" for k in range(nodes)]
        self.port = [f"ch{tag}p{k}" for k in range(nodes)]
        self.net = f"10.78.{os.getpid() % 250 + 1}"
        self.service_addr = f"{self.net}.100"  # etcd members and the harness's side clients
        try:
            self._up()
        except BaseException:
            self.close()
            raise

    def _up(self):
        _ip("netns", "add", self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "addr", "add", f"{self.service_addr}/24", "dev", "br0")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        _ip("-n", self.bridge_ns, "link", "set", "lo", "up")
        for k, ns in enumerate(self.ns):
            _ip("netns", "add", ns)
            _ip("link", "add", self.veth[k], "netns", ns, "type", "veth", "peer", "name",
                self.port[k], "netns", self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "set", self.port[k], "master", "br0")
            _ip("-n", self.bridge_ns, "link", "set", self.port[k], "up")
            _ip("-n", ns, "addr", "add", f"{self.net}.{k + 1}/24", "dev", self.veth[k])
            _ip("-n", ns, "link", "set", self.veth[k], "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def addr(self, k):
        return f"{self.net}.{k + 1}"

    def prefix(self, k):
        return ["ip", "netns", "exec", self.ns[k]]

    def ifname(self, k):
        """The interface gloo must use (the host name resolves to loopback here)."""
        return self.veth[k]

    def service_prefix(self):
        return ["ip", "netns", "exec", self.bridge_ns]

    def cut(self, k):
        _ip("-n", self.ns[k], "link", "set", self.veth[k], "down")

    def restore(self, k):
        _ip("-n", self.ns[k], "link", "set", self.veth[k], "up", check=False)

    def listening(self, k):
        """Listening TCP ports in node k's namespace."""
        out = subprocess.run([*self.prefix(k), "cat", "/proc/net/tcp", "/proc/net/tcp6"],
                             capture_output=True, text=True).stdout
        return _listening_ports(out)

    def close(self):
        for ns in self.ns + [self.bridge_ns]:
            _ip("netns", "del", ns, check=False)


class Loopback:
    kind = "loopback"
    service_addr = "127.0.0.1"

    def __init__(self, nodes):
        self.nodes = nodes

    def addr(self, k):
        return f"127.0.0.{k + 2}"

    def prefix(self, k):
        return []

    def ifname(self, k):
        return "lo"

    def service_prefix(self):
        return []

    def cut(self, k):
        raise RuntimeError("link cuts need network namespaces")

    restore = cut

    def listening(self, k):
        with open("/proc/net/tcp") as f:
            return _listening_ports(f.read())

    def close(self):
        pass


def _listening_ports(text):
    ports = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def make(nodes, want):
    """want: 'auto', 'netns' or 'loopback'. Returns (topology, why-not-netns or None)."""
    if want == "loopback":
        return Loopback(nodes), "asked for loopback"
    why = None
    if os.geteuid() != 0:
        why = "not root"
    elif subprocess.run(["which", "ip"], capture_output=True).returncode != 0:
        why = "no `ip` (iproute2)"
    if why is None:
        try:
            return Netns(nodes), None
        except (OSError, subprocess.CalledProcessError) as e:
            why = f"cannot create namespaces: {(getattr(e, 'stderr', None) or e)}".strip()
    if want == "netns":
        raise RuntimeError(f"network namespaces unavailable: {why}")
    return Loopback(nodes), why
