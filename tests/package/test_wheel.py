# SPDX-License-Identifier: MIT
"""The Python wheel (pyproject.toml, scikit-build-core driving this CMake project): built offline
with the pinned backend, installed into a fresh virtual environment; `ddprun` and `ddprun-store` are
on that environment's PATH and need nothing beyond glibc, `python -m ddprun` answers the same way
(same output, same exit code), and a 2-rank torch job runs under the venv's ddprun.
Skipped (77) when the pinned scikit-build-core is not installed (scripts/setup.sh installs it) or no
torch is importable for the job."""
import glob
import os
import re
import subprocess
import sys
import zipfile

from package_common import (DDP_CHECK, PACKAGE_DEFINES, SOURCE_DIR, VERSION, check_two_rank_torch_job,
                            check_version, compiler_launcher_args, fail, package_build, python_has_torch,
                            run, skip, temp_dir)


def pinned_backend():
    with open(os.path.join(SOURCE_DIR, "pyproject.toml")) as f:
        return re.search(r'requires = \["scikit-build-core==([0-9.]+)"\]', f.read()).group(1)


def main():
    python = sys.executable
    version = pinned_backend()
    probe = subprocess.run([python, "-c", "import scikit_build_core; print(scikit_build_core.__version__)"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if probe.stdout.strip() != version:
        skip(f"scikit-build-core=={version} is not installed for {python} (scripts/setup.sh installs it)")

    # The wheel's switches must be the .deb's, or sharing the build directory recompiles everything.
    with open(os.path.join(SOURCE_DIR, "pyproject.toml")) as f:
        table = f.read().split("[tool.scikit-build.cmake.define]", 1)[1].split("\n[", 1)[0]
    wheel_defines = dict(re.findall(r'^(\w+) = "([^"]*)"', table, re.M))
    deb_defines = {k: v for k, v in PACKAGE_DEFINES.items() if k != "CMAKE_BUILD_TYPE"}
    if wheel_defines != deb_defines:
        fail(f"pyproject.toml's cmake.define {wheel_defines} differs from the .deb's {deb_defines}")

    work = temp_dir("wheel")
    dist = os.path.join(work, "dist")
    # The .deb's build directory (package_build): after package.deb it compiles nothing.
    build, env = package_build()
    # Offline: the pinned backend already installed, no build isolation, no index.
    run([python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-w", dist,
         f"-Cbuild-dir={build}", *compiler_launcher_args("-Ccmake.define."), SOURCE_DIR], env=env,
        timeout=2300)
    wheels = glob.glob(os.path.join(dist, "*.whl"))
    expected = f"ddprun-{VERSION}-py3-none-linux_x86_64.whl"
    if [os.path.basename(w) for w in wheels] != [expected]:
        fail(f"expected {expected}, got {wheels}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"ddprun-{VERSION}.dist-info/METADATA").decode()
    for name in (f"ddprun-{VERSION}.data/scripts/ddprun", f"ddprun-{VERSION}.data/scripts/ddprun-store",
                 "ddprun/__init__.py", "ddprun/__main__.py"):
        if name not in names:
            fail(f"the wheel lacks {name}: {names}")
    if "Requires-Dist" in metadata:
        fail(f"the wheel declares Python dependencies:\n{metadata}")
    if any("torch" in n.lower() for n in names):
        fail(f"the wheel carries LibTorch files: {[n for n in names if 'torch' in n.lower()]}")
    print(f"ok: {expected}: {len(names)} files, no dependency")

    # A fresh venv; --system-site-packages only so that the 2-rank job below finds torch.
    venv = os.path.join(work, "venv")
    run([python, "-m", "venv", "--system-site-packages", venv])
    venv_python = os.path.join(venv, "bin", "python")
    run([venv_python, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
         wheels[0]])
    ddprun = os.path.join(venv, "bin", "ddprun")
    check_version(ddprun)
    check_version("ddprun", runner=[venv_python, "-m"])
    store_help = run([os.path.join(venv, "bin", "ddprun-store"), "--help"]).stdout
    if "--port" not in store_help:
        fail(f"ddprun-store --help from the venv:\n{store_help}")

    # Nothing beyond glibc: the wheel must run where neither libfmt nor a matching libstdc++ exists.
    libs = run(["ldd", ddprun]).stdout
    foreign = [l.split()[0] for l in libs.splitlines()
               if l.strip() and not re.match(r"\s*(linux-vdso|/lib64/ld-linux|lib(c|m|pthread|dl|rt)\.so)", l)]
    if foreign:
        fail(f"the wheel's ddprun links more than glibc: {foreign}\n{libs}")
    print("ok: ddprun links glibc only")

    # `python -m ddprun` is ddprun: same usage error, same exit code.
    direct = run([ddprun, "--no-such-flag"], check=False)
    via_python = run([venv_python, "-m", "ddprun", "--no-such-flag"], check=False)
    if direct.returncode == 0 or (direct.returncode, direct.stderr) != (via_python.returncode, via_python.stderr):
        fail(f"python -m ddprun differs from ddprun: {direct} vs {via_python}")
    print(f"ok: python -m ddprun --no-such-flag exits {via_python.returncode} like ddprun")

    if not python_has_torch(venv_python):
        skip(f"no torch importable from {venv_python} for the 2-rank job")
    # The job as a venv user runs it: the venv's bin first on PATH, so ddprun's `python3` is the venv's.
    job_env = dict(os.environ, PATH=os.path.join(venv, "bin") + os.pathsep + os.environ.get("PATH", ""),
                   VIRTUAL_ENV=venv)
    check_two_rank_torch_job("ddprun", env=job_env)
    check_two_rank_torch_job("ddprun", env=job_env, runner=[venv_python, "-m"])
    print("wheel: all checks passed")


if __name__ == "__main__":
    main()
