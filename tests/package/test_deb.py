# SPDX-License-Identifier: MIT
"""The .deb: built by CPack from a self-contained configuration (DDPRUN_SELF_CONTAINED: fmt and the
C++ runtime compiled in), its Depends computed by dpkg-shlibdeps. Checks:
- Depends names the package of every shared library any packaged ELF file links (readelf NEEDED),
  and only packages that apt and dpkg themselves need (present on every Debian system), so
  `dpkg -i` works on a clean machine;
- the unpacked tree (dpkg-deb -x) runs: `ddprun --version` and a 2-rank job;
- a real `dpkg -i` into a throwaway root (an overlay of / in a private mount namespace, chroot):
  /usr/bin/ddprun --version, `man ddprun`, a 2-rank torch job (Debian's torch 1.13 when present),
  then `dpkg -r` removes every file. That part needs root and overlayfs; without them the test
  reports skipped (77) after the other checks passed."""
import glob
import os
import re
import shutil
import subprocess

from package_common import (DDP_CHECK, PACKAGE_DEFINES, SKIP, SOURCE_DIR, VERSION, check_two_rank_shell_job,
                            check_version, compiler_launcher_args, fail, package_build, python_has_torch,
                            run, temp_dir)



def base_packages():
    """Packages every Debian system that can run `dpkg -i` has: dpkg, apt and what they depend on,
    recursively (from the package lists; alternatives count as present, which errs on the side of
    accepting)."""
    proc = run(["apt-cache", "depends", "--recurse", "--important", "--no-recommends", "--no-suggests",
                "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", "apt", "dpkg"],
               check=False, timeout=300)
    names = {line.strip().split(":")[0] for line in proc.stdout.splitlines()
             if line and not line.startswith((" ", "<"))}
    if proc.returncode != 0 or "libc6" not in names:
        fail(f"apt-cache cannot list the dependencies of apt and dpkg:\n{proc.stderr}")
    return names


def build_deb():
    build, env = package_build()
    # -U: a wheel build in the same directory leaves scikit-build-core's SKBUILD* entries in the cache,
    # and with SKBUILD set the install rules target a wheel's layout (cmake/install.cmake).
    run(["cmake", "-S", SOURCE_DIR, "-B", build, "-U", "SKBUILD*",
         *(f"-D{k}={v}" for k, v in PACKAGE_DEFINES.items()), *compiler_launcher_args()], env=env)
    run(["cmake", "--build", build], env=env, timeout=2300)
    shutil.rmtree(os.path.join(build, "packages"), ignore_errors=True)
    run(["cpack", "-G", "DEB"], cwd=build, timeout=600)
    debs = glob.glob(os.path.join(build, "packages", "ddprun_*.deb"))
    if len(debs) != 1:
        fail(f"expected one ddprun_*.deb, found {debs}")
    return debs[0]


def parse_depends(field):
    """'libc6 (>= 2.34), libgcc-s1 (>= 3.0)' -> {'libc6', 'libgcc-s1'} (alternatives flattened)."""
    names = set()
    for item in filter(None, (part.strip() for part in re.split(r"[,|]", field))):
        names.add(item.split()[0].split(":")[0])
    return names


def owning_package(soname):
    """The installed Debian package that provides a shared library, found like the loader finds it."""
    for line in run(["ldconfig", "-p"]).stdout.splitlines():
        # "\tlibfmt.so.9 (libc6,x86-64) => /lib/x86_64-linux-gnu/libfmt.so.9"
        match = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if not match or match.group(1) != soname or "x86-64" not in match.group(2):
            continue
        path = match.group(3)
        for candidate in (path, os.path.realpath(path), path.replace("/usr/lib/", "/lib/", 1),
                          path.replace("/lib/", "/usr/lib/", 1)):
            query = subprocess.run(["dpkg", "-S", candidate], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
            if query.returncode == 0:
                return query.stdout.split(":")[0].strip()
    fail(f"no installed package provides {soname}")


def check_depends(deb, tree):
    fields = run(["dpkg-deb", "-f", deb, "Package", "Version", "Depends"]).stdout
    control = dict(line.split(": ", 1) for line in fields.strip().splitlines())
    if control.get("Package") != "ddprun" or control.get("Version") != VERSION:
        fail(f"unexpected control fields: {control}")
    depends = parse_depends(control.get("Depends", ""))
    needed = {}
    for root, _, files in os.walk(tree):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
            dynamic = run(["readelf", "-d", path]).stdout
            for soname in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic):
                needed.setdefault(soname, []).append(os.path.relpath(path, tree))
    if not needed:
        fail("no packaged ELF file links a shared library: the package is empty?")
    for soname, users in sorted(needed.items()):
        package = owning_package(soname)
        if package not in depends:
            fail(f"{soname} (linked by {users}) comes from {package}, which Depends ({depends}) lacks")
    extra = depends - base_packages()
    if extra:
        fail(f"Depends names {extra}: not on every Debian system, so `dpkg -i` fails on a clean machine")
    print(f"ok: Depends {control['Depends']} covers {sorted(needed)}")


THROWAWAY_ROOT_SCRIPT = r"""
set -eu
work="$1"; deb="$2"; job="$3"
mkdir -p "$work/upper" "$work/overlay-work" "$work/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$work/upper,workdir=$work/overlay-work" "$work/root"
for fs in proc sys dev dev/shm; do mount --rbind "/$fs" "$work/root/$fs"; done
chroot "$work/root" /bin/sh -eu -c "
  test ! -e /usr/bin/ddprun || dpkg -r ddprun >/dev/null
  dpkg -i '$deb'
  dpkg -s ddprun | grep -q '^Status: install ok installed'
  /usr/bin/ddprun --version
  MANWIDTH=100 man ddprun | grep -q -- --nproc_per_node && echo 'ok: man ddprun'
  $job
  dpkg -r ddprun
  test ! -e /usr/bin/ddprun && test ! -e /usr/share/man/man1/ddprun.1.gz && test ! -e /usr/share/man/man1/ddprun.1
  echo 'ok: dpkg -r removed the files'
"
"""


def check_dpkg_install(work, deb):
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("chroot"):
        return "not root (or no unshare/chroot)"
    # The 2-rank job inside the throwaway root: Debian's torch 1.13 DDP check when it is installed.
    if python_has_torch("/usr/bin/python3"):
        job = f"/usr/bin/ddprun --nproc_per_node=2 --python=/usr/bin/python3 {DDP_CHECK}"
    else:
        job = "/usr/bin/ddprun --nproc_per_node=2 /bin/sh -c 'echo worker rank=$RANK world=$WORLD_SIZE'"
    root_work = os.path.join(work, "throwaway-root")
    os.makedirs(root_work)
    proc = run(["unshare", "--mount", "--fork", "/bin/sh", "-c", THROWAWAY_ROOT_SCRIPT, "sh", root_work, deb, job],
               check=False, timeout=600)
    print(proc.stdout, proc.stderr)
    if proc.returncode != 0 and "mount" in proc.stderr and "overlay" in proc.stderr:
        return f"overlayfs is not available: {proc.stderr.strip()}"
    if proc.returncode != 0:
        fail(f"dpkg -i / run / dpkg -r in the throwaway root failed ({proc.returncode})")
    if f"ddprun {VERSION}" not in proc.stdout:
        fail("the installed /usr/bin/ddprun did not print its version")
    if "DDP_CHECK" in job and proc.stdout.count("DDP_CHECK") != 2:
        fail("the 2-rank torch job did not report from both ranks")
    print("ok: dpkg -i, ddprun --version, man ddprun, 2-rank job, dpkg -r in a throwaway root")
    return None


def main():
    work = temp_dir("deb")
    deb = build_deb()
    print(f"built {deb}")
    tree = os.path.join(work, "unpacked")
    run(["dpkg-deb", "-x", deb, tree])
    check_depends(deb, tree)
    ddprun = os.path.join(tree, "usr", "bin", "ddprun")
    check_version(ddprun)
    check_two_rank_shell_job(ddprun, env=dict(os.environ, PATH="/usr/bin:/bin"))
    for path in ("usr/bin/ddprun-store", "usr/share/man/man1/ddprun.1", "usr/share/doc/ddprun/LICENSE"):
        if not os.path.exists(os.path.join(tree, path)):
            fail(f"the package lacks /{path}")

    why_not = check_dpkg_install(work, deb)
    if why_not:
        print(f"SKIP: the real dpkg -i check: {why_not}")
        raise SystemExit(SKIP)
    print("deb: all checks passed")


if __name__ == "__main__":
    main()
