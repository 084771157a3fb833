#!/usr/bin/env python3
"""The aarch64 artifacts under emulation (Debian's qemu-user: `qemu-aarch64`, with the aarch64
dynamic loader and glibc of libc6-arm64-cross as its -L prefix): from the aarch64 tarball, ddprun,
ddprun-store and ddprun-store-proxy print their version; a 2-rank `--no-python` job runs (the
workers are this machine's own /bin/sh: a process qemu-user execs runs natively); ddprun-store
serves a torch 1.13 (G1) client's SET/GET/ADD. The aarch64 wheel carries the same executables
(checked byte for byte). Skipped (77) without qemu-aarch64 or the cross loader.
"""
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from portable_common import VERSION, artifact, fail, read_port, run, skip, store_round_trip  # noqa: E402

PREFIX = "/usr/aarch64-linux-gnu"  # libc6-arm64-cross: lib/ld-linux-aarch64.so.1, libc.so.6


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
        check(work, qemu, tarball, wheel)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("OK: the aarch64 artifacts under qemu-aarch64")


def check(work, qemu, tarball, wheel):
    with tarfile.open(tarball) as t:
        t.extractall(work)
    bindir = os.path.join(work, f"ddprun-{VERSION}-linux-aarch64", "bin")
    emu = [qemu, "-L", PREFIX]
    programs = ("ddprun", "ddprun-store", "ddprun-store-proxy")
    with zipfile.ZipFile(wheel) as z:
        for p in programs:
            with open(os.path.join(bindir, p), "rb") as f:
                if z.read(f"ddprun-{VERSION}.data/scripts/{p}") != f.read():
                    fail(f"the aarch64 wheel's {p} differs from the tarball's")
    for p in programs:
        path = os.path.join(bindir, p)
        machine = run(["file", "-b", path], check=False).stdout if shutil.which("file") else "ARM aarch64"
        if "aarch64" not in machine:
            fail(f"{p} is not an aarch64 executable: {machine}")
        out = run(emu + [path, "--version"], timeout=60).stdout
        if VERSION not in out:
            fail(f"{p} --version under qemu: {out!r}")
        print(f"aarch64: {out.strip()}", flush=True)

    jobdir = os.path.join(work, "job")
    os.makedirs(jobdir)
    run(emu + [os.path.join(bindir, "ddprun"), "--nproc_per_node", "2", "--monitor_interval", "0.1",
               "--no-python", "/bin/sh", "-c", f"echo $RANK $WORLD_SIZE > {jobdir}/$RANK"], timeout=120)
    ranks = sorted(open(os.path.join(jobdir, r)).read().strip() for r in os.listdir(jobdir))
    if ranks != ["0 2", "1 2"]:
        fail(f"2-rank job under qemu: {ranks}")
    print("aarch64: a 2-rank --no-python job ran", flush=True)

    store = subprocess.Popen(emu + [os.path.join(bindir, "ddprun-store"), "--host", "127.0.0.1",
                                    "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        store_round_trip(read_port(store))
    finally:
        store.kill()
        store.wait()
    print("aarch64: ddprun-store served a SET/GET/ADD client", flush=True)


if __name__ == "__main__":
    main()
