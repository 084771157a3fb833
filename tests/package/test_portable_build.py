#!/usr/bin/env python3
"""scripts/package.sh writes the portable artifacts into dist/, and they are what they claim:
for x86_64 and aarch64, a wheel named py3-none-manylinux_2_28_ARCH that `auditwheel show` finds
consistent with that tag (package.sh checks it and fails otherwise), with no Requires-Dist, the
three executables as scripts and the man pages; a tarball with bin/ddprun, bin/ddprun-store,
bin/ddprun-store-proxy, the man pages, the bash and zsh completions and the LICENSE; every
executable needs no glibc symbol version above 2.28 and no shared library but glibc's.

The other portable checks (test_portable_bullseye.py, test_portable_aarch64.py) run after this one.
Incremental after the first run on a machine (tools, OpenSSL and zig's cache in DDPRUN_CACHE, the
compile in build-portable/ and ccache). Skipped (77) when this machine cannot reach PyPI's ziglang
and none is cached, or lacks ninja.
"""
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from portable_common import SOURCE, VERSION, artifact, fail, skip  # noqa: E402

GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
              "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


def elf_needs(path):
    """(highest GLIBC_x.y version the file needs, its NEEDED libraries), from readelf."""
    out = subprocess.run(["readelf", "-W", "--dyn-syms", "-d", path], capture_output=True,
                         text=True, check=True).stdout
    versions = [tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([0-9]+\.[0-9]+)", out)]
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
    return max(versions, default=(0, 0)), needed


def main():
    if not shutil.which("ninja"):
        skip("ninja is not installed")
    started = time.monotonic()
    r = subprocess.run([os.path.join(SOURCE, "scripts", "package.sh")], cwd=SOURCE)
    print(f"scripts/package.sh: exit {r.returncode} after {time.monotonic() - started:.0f} s", flush=True)
    if r.returncode != 0:
        fail("scripts/package.sh failed (its output is above)")
    programs = ("ddprun", "ddprun-store", "ddprun-store-proxy")
    for arch in ("x86_64", "aarch64"):
        wheel = artifact("whl", arch)
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
            # pip installs a script executable only if its mode is a regular file's with x bits.
            not_exec = [i.filename for i in z.infolist() if "/scripts/" in i.filename and not (
                stat.S_ISREG(i.external_attr >> 16) and i.external_attr >> 16 & 0o111)]
            meta = z.read(f"ddprun-{VERSION}.dist-info/METADATA").decode()
            tag = z.read(f"ddprun-{VERSION}.dist-info/WHEEL").decode()
        if not_exec:
            fail(f"{wheel}: pip would install {not_exec} without execute permission")
        if f"Tag: py3-none-manylinux_2_28_{arch}" not in tag:
            fail(f"{wheel}: WHEEL says {tag!r}")
        if "Requires-Dist" in meta:
            fail(f"{wheel} has a Python dependency")
        want = {f"ddprun-{VERSION}.data/scripts/{p}" for p in programs} | {
            "ddprun/__init__.py", "ddprun/__main__.py",
            f"ddprun-{VERSION}.data/data/share/man/man1/ddprun.1"}
        if want - names:
            fail(f"{wheel} lacks {sorted(want - names)}")

        tarball = artifact("tar.gz", arch)
        top = f"ddprun-{VERSION}-linux-{arch}"
        with tarfile.open(tarball) as t:
            members = {m.name: m for m in t.getmembers()}
            want = {f"{top}/bin/{p}" for p in programs} | {
                f"{top}/share/man/man1/ddprun.1", f"{top}/share/man/man1/ddprun-store.1",
                f"{top}/share/bash-completion/completions/ddprun",
                f"{top}/share/zsh/site-functions/_ddprun", f"{top}/share/doc/ddprun/LICENSE"}
            if want - set(members):
                fail(f"{tarball} lacks {sorted(want - set(members))}")
            extract = os.path.join(SOURCE, "build-portable", "check", arch)
            shutil.rmtree(extract, ignore_errors=True)
            t.extractall(extract)
        for p in programs:
            path = os.path.join(extract, top, "bin", p)
            if not os.access(path, os.X_OK):
                fail(f"{path} is not executable")
            highest, needed = elf_needs(path)
            if highest > (2, 28) or needed - GLIBC_LIBS:
                fail(f"{arch} {p}: needs GLIBC_{highest[0]}.{highest[1]} and {sorted(needed)}")
            print(f"{arch} {p}: glibc symbols <= {highest[0]}.{highest[1]}, libraries {sorted(needed)}")
    print("OK: both architectures' wheels and tarballs")


if __name__ == "__main__":
    main()
