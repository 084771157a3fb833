"""Shared parts of the portable artifacts' checks (test_portable_*.py; docs/packaging.md).

The artifacts are what scripts/package.sh wrote into dist/ (the `package.portable_build` test runs
it first); the machine's caches (the bullseye root, the tools) live in DDPRUN_CACHE, outside the
clone, so a second CI run on the same machine reuses them.
"""
import glob
import os
import socket
import struct
import subprocess
import sys

SOURCE = os.environ.get("DDPRUN_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))


def _project_version():
    """DDPRUN_VERSION (CTest sets it), else the `project(ddprun VERSION x.y.z)` of CMakeLists.txt."""
    import re
    with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
        m = re.search(r"^project\(ddprun VERSION ([0-9]+\.[0-9]+\.[0-9]+)", f.read(), re.M)
    return m.group(1) if m else ""


VERSION = os.environ.get("DDPRUN_VERSION") or _project_version()
CACHE = os.environ.get("DDPRUN_CACHE", "/var/cache/ddprun")
DIST = os.path.join(SOURCE, "dist")


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def fail(why):
    print(f"FAIL: {why}", file=sys.stderr)
    sys.exit(1)


def artifact(kind, arch):
    """dist/'s wheel or tarball for `arch` (kind "whl" or "tar.gz")."""
    pattern = (f"ddprun-{VERSION}-py3-none-manylinux_2_28_{arch}.whl" if kind == "whl"
               else f"ddprun-{VERSION}-linux-{arch}.tar.gz")
    hits = glob.glob(os.path.join(DIST, pattern))
    if not hits:
        fail(f"{pattern} is not in {DIST} (scripts/package.sh writes it)")
    return hits[0]


def run(cmd, timeout=120, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        fail(f"{cmd} exited {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")
    return r


def read_port(proc):
    """The port a `ddprun-store --port 0` prints as its first stdout line."""
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        fail(f"ddprun-store printed {line!r} instead of its port")
    return int(line)


def store_round_trip(port):
    """A torch 1.13 (G1) client's SET, GET and ADD against the store on `port`."""
    def s(b):
        return struct.pack("<Q", len(b)) + b

    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"\x00" + s(b"portable/key") + s(b"value-1"))    # SET (no reply)
        c.sendall(b"\x05" + struct.pack("<Q", 1) + s(b"portable/key"))  # WAIT: then GET
        if c.recv(1) != b"\x00":
            fail("the store's WAIT did not answer STOP_WAITING")
        c.sendall(b"\x02" + s(b"portable/key"))                     # GET
        n = struct.unpack("<Q", recv_exact(c, 8))[0]
        value = recv_exact(c, n)
        c.sendall(b"\x03" + s(b"portable/counter") + struct.pack("<q", 41))  # ADD
        total = struct.unpack("<q", recv_exact(c, 8))[0]
    if value != b"value-1" or total != 41:
        fail(f"store round trip: GET gave {value!r}, ADD gave {total}")


def recv_exact(c, n):
    out = b""
    while len(out) < n:
        chunk = c.recv(n - len(out))
        if not chunk:
            fail("the store closed the connection")
        out += chunk
    return out
