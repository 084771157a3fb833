#!/usr/bin/env python3
"""The aarch64 artifacts under emulation (Debian's qemu-user: `qemu-aarch64`, with the aarch64
dynamic loader and glibc of libc6-arm64-cross as its -L prefix). From the aarch64 tarball:
- ddprun, ddprun-store and ddprun-store-proxy are aarch64 ELF executables (e_machine 183) and print
  `NAME VERSION` under qemu;
- a 2-rank `--no-python` job runs (the workers are this machine's own /bin/sh: a process that
  qemu-user execs runs natively, there being no binfmt handler here);
- a 2-agent c10d job on loopback with DDPRUN_RDZV_TOKEN, both agents aarch64 under qemu: the store
  one agent hosts, the other's connection to it, the HMAC handshake of the static libcrypto;
- ddprun-store serves a torch 1.13 (G1) client's SET/WAIT/GET/ADD and, where python3 has torch,
  torch's own TCPStore client (set/get/add/check).
The aarch64 wheel carries the same executables (checked byte for byte). Skipped (77) without
qemu-aarch64 or the cross loader.
"""
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from portable_common import VERSION, artifact, fail, read_port, run, skip, store_round_trip  # noqa: E402

PREFIX = "/usr/aarch64-linux-gnu"  # libc6-arm64-cross: lib/ld-linux-aarch64.so.1, libc.so.6
EM_AARCH64 = 183
PROGRAMS = ("ddprun", "ddprun-store", "ddprun-store-proxy")
TOKEN = "portable-aarch64-token"
FAST = "heartbeat_interval=0.3,heartbeat_timeout=5,join_timeout=120,last_call_timeout=1"
TORCH_CLIENT = """
import datetime, sys, torch.distributed as d
s = d.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=60))
s.set("aarch64/key", b"from-torch")
assert s.get("aarch64/key") == b"from-torch", s.get("aarch64/key")
assert s.add("aarch64/n", 5) == 5 and s.add("aarch64/n", 2) == 7
assert s.check(["aarch64/key"]) and not s.check(["aarch64/absent"])
print("torch client ok")
"""


def main():
    qemu = shutil.which("qemu-aarch64")
    if not qemu:
        skip("qemu-aarch64 is not installed (Debian: qemu-user; scripts/setup.sh installs it)")
    if not os.path.exists(os.path.join(PREFIX, "lib", "ld-linux-aarch64.so.1")):
        skip("no aarch64 dynamic loader (Debian: libc6-arm64-cross; scripts/setup.sh installs it)")
    tarball = artifact("tar.gz", "aarch64")
    wheel = artifact("whl", "aarch64")
    work = tempfile.mkdtemp(prefix="ddprun-aarch64-")
    try:
        check(work, [qemu, "-L", PREFIX], tarball, wheel)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("OK: the aarch64 artifacts under qemu-aarch64")


def elf_machine(path):
    with open(path, "rb") as f:
        head = f.read(20)
    if head[:4] != b"\x7fELF" or head[5] != 1:  # little-endian
        return None
    return int.from_bytes(head[18:20], "little")


def check(work, emu, tarball, wheel):
    with tarfile.open(tarball) as t:
        t.extractall(work)
    bindir = os.path.join(work, f"ddprun-{VERSION}-linux-aarch64", "bin")
    with zipfile.ZipFile(wheel) as z:
        for p in PROGRAMS:
            with open(os.path.join(bindir, p), "rb") as f:
                if z.read(f"ddprun-{VERSION}.data/scripts/{p}") != f.read():
                    fail(f"the aarch64 wheel's {p} differs from the tarball's")
    for p in PROGRAMS:
        path = os.path.join(bindir, p)
        machine = elf_machine(path)
        if machine != EM_AARCH64:
            fail(f"{p} is not an aarch64 ELF executable (e_machine {machine})")
        out = run(emu + [path, "--version"], timeout=60).stdout
        if not out.startswith(f"{p} {VERSION}"):
            fail(f"{p} --version under qemu: {out!r}")
        print(f"aarch64: {out.strip()}", flush=True)
    ddprun = emu + [os.path.join(bindir, "ddprun")]

    jobdir = os.path.join(work, "job")
    os.makedirs(jobdir)
    run(ddprun + ["--nproc_per_node", "2", "--monitor_interval", "0.1", "--no-python", "/bin/sh",
                  "-c", f"echo $RANK $WORLD_SIZE > {jobdir}/$RANK"], timeout=120)
    ranks = sorted(open(os.path.join(jobdir, r)).read().strip() for r in os.listdir(jobdir))
    if ranks != ["0 2", "1 2"]:
        fail(f"2-rank job under qemu: {ranks}")
    print("aarch64: a 2-rank --no-python job ran", flush=True)

    two_agents_c10d(work, ddprun)

    store = subprocess.Popen(emu + [os.path.join(bindir, "ddprun-store"), "--host", "127.0.0.1",
                                    "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        port = read_port(store)
        store_round_trip(port)
        print("aarch64: ddprun-store served a G1 SET/WAIT/GET/ADD client", flush=True)
        torch_client(port)
        if store.poll() is not None:
            fail(f"ddprun-store exited {store.returncode} after serving its clients")
    finally:
        store.kill()
        store.wait()


def two_agents_c10d(work, ddprun):
    """Two aarch64 agents, one c10d rendezvous on loopback, with the token."""
    outdir = os.path.join(work, "c10d")
    os.makedirs(outdir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = ddprun + ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "aarch64", "--rdzv_conf", FAST,
                    "--local_addr", "127.0.0.1", "--master_port", "0", "--monitor_interval", "0.1",
                    "--no-python", "/bin/sh", "-c", f"echo $RANK $WORLD_SIZE > {outdir}/$RANK"]
    env = dict(os.environ, DDPRUN_RDZV_TOKEN=TOKEN)
    agents = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(2)]
    outs = []
    for a in agents:
        try:
            outs.append(a.communicate(timeout=180)[0])
        except subprocess.TimeoutExpired:
            for b in agents:
                b.kill()
                b.wait()
            fail("c10d under qemu: the 2-agent job did not end in 180 s")
    codes = [a.returncode for a in agents]
    ranks = sorted(open(os.path.join(outdir, r)).read().strip() for r in os.listdir(outdir))
    if codes != [0, 0] or ranks != ["0 2", "1 2"]:
        fail(f"c10d under qemu: exit codes {codes}, ranks {ranks}\n" + "\n---\n".join(outs))
    print("aarch64: a 2-agent c10d job with the token formed and ended 0", flush=True)


def torch_client(port):
    probe = subprocess.run(["python3", "-c", "import torch.distributed"], capture_output=True)
    if probe.returncode != 0:
        print("aarch64: python3 has no torch here; the torch TCPStore client was not run", flush=True)
        return
    out = run(["python3", "-c", TORCH_CLIENT, str(port)], timeout=120).stdout
    if "client ok" not in out:
        fail(f"torch's TCPStore client against the aarch64 ddprun-store: {out!r}")
    print("aarch64: ddprun-store served torch's TCPStore client (set/get/add/check)", flush=True)


if __name__ == "__main__":
    main()
