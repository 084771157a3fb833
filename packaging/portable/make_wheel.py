#!/usr/bin/env python3
"""Writes the portable wheel from an installed tree (scripts/package.sh; docs/packaging.md).

The same files as `pip wheel .` (the executables as the wheel's scripts, the man pages as data, the
small `ddprun` package for `python -m ddprun`) and the project metadata of pyproject.toml, but tagged
for the target (py3-none-manylinux_2_28_ARCH): scikit-build-core tags a wheel for the machine that
builds it, and these are cross-compiled. Prints the wheel's path.
"""

import argparse
import base64
import hashlib
import os
import stat
import sys
import tomllib
import zipfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", required=True, help="cmake --install prefix of the runtime component")
    ap.add_argument("--source", required=True, help="the source tree (pyproject.toml, python/ddprun)")
    ap.add_argument("--version", required=True)
    ap.add_argument("--tag", required=True, help="e.g. py3-none-manylinux_2_28_x86_64")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    with open(os.path.join(a.source, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    if project.get("dependencies"):
        sys.exit("make_wheel: the wheel must have no Python dependency")
    name, version = project["name"], a.version
    data = f"{name}-{version}.data"
    info = f"{name}-{version}.dist-info"

    files = []  # (archive name, source path or bytes, executable)
    pkg = os.path.join(a.source, "python", "ddprun")
    for entry in sorted(os.listdir(pkg)):
        if entry.endswith(".py"):
            files.append((f"ddprun/{entry}", os.path.join(pkg, entry), False))
    bindir = os.path.join(a.stage, "bin")
    for entry in sorted(os.listdir(bindir)):
        files.append((f"{data}/scripts/{entry}", os.path.join(bindir, entry), True))
    mandir = os.path.join(a.stage, "share", "man")
    for dirpath, _, names in sorted(os.walk(mandir)):
        for entry in sorted(names):
            path = os.path.join(dirpath, entry)
            files.append((f"{data}/data/share/man/{os.path.relpath(path, mandir)}", path, False))

    with open(os.path.join(a.source, project.get("readme", "README.md")), encoding="utf-8") as f:
        readme = f.read()
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
            f"Summary: {project['description']}", f"License: {project.get('license', '')}",
            f"Requires-Python: {project['requires-python']}",
            f"Keywords: {','.join(project.get('keywords', []))}"]
    meta += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    meta += ["Description-Content-Type: text/markdown", "", readme]
    files.append((f"{info}/METADATA", "\n".join(meta).encode(), False))
    files.append((f"{info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: ddprun make_wheel.py\n"
                                    f"Root-Is-Purelib: false\nTag: {a.tag}\n").encode(), False))
    with open(os.path.join(a.source, "LICENSE"), "rb") as f:
        files.append((f"{info}/LICENSE", f.read(), False))

    out = os.path.join(a.out, f"{name}-{version}-{a.tag}.whl")
    record = []
    with zipfile.ZipFile(out + ".part", "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, src, executable in files:
            if isinstance(src, bytes):
                content = src
            else:
                with open(src, "rb") as f:
                    content = f.read()
            zi = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            # The file type too: pip marks a script executable only when the mode says S_IFREG
            # (pip's zip_item_is_executable); 0o755 alone installs it without its x bits.
            zi.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            z.writestr(zi, content)
            digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={digest},{len(content)}")
        record.append(f"{info}/RECORD,,")
        zi = zipfile.ZipInfo(f"{info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0))
        zi.external_attr = (stat.S_IFREG | 0o644) << 16
        z.writestr(zi, "\n".join(record) + "\n")
    os.replace(out + ".part", out)
    print(out)


if __name__ == "__main__":
    main()
