# SPDX-License-Identifier: MIT
"""Shared helpers of the packaging tests (label package): run a command, skip with CTest's code 77,
and the two jobs every installed ddprun must run: `--version` and a 2-rank job."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
SOURCE_DIR = os.environ.get("DDPRUN_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
BUILD_DIR = os.environ.get("DDPRUN_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
VERSION = os.environ.get("DDPRUN_VERSION", "")
DDP_CHECK = os.path.join(SOURCE_DIR, "tests", "launcher", "ddp_check.py")


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def skip(message):
    print(f"SKIP: {message}", flush=True)
    sys.exit(SKIP)


def run(argv, check=True, timeout=600, **kwargs):
    """Runs argv, returns the CompletedProcess (text); on an unexpected exit code prints everything."""
    print("+ " + " ".join(str(a) for a in argv), flush=True)
    proc = subprocess.run([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        fail(f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def temp_dir(name):
    """A fresh directory under the build tree's Testing/ area (kept on failure for inspection)."""
    base = os.path.join(BUILD_DIR, "package-test")
    os.makedirs(base, exist_ok=True)
    path = os.path.join(base, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


# The self-contained Release configuration the .deb and the wheel both ship (pyproject.toml's
# [tool.scikit-build.cmake.define] holds the same switches). Both tests build in one directory, so
# whichever runs second compiles nothing: one compile of the launcher per CI run, not two.
PACKAGE_DEFINES = {"CMAKE_BUILD_TYPE": "Release", "DDPRUN_SELF_CONTAINED": "ON", "BUILD_TESTING": "OFF",
                   "DDPRUN_WITH_TORCH": "OFF", "DDPRUN_BUILD_EXAMPLES": "OFF", "DDPRUN_BUILD_BENCH": "OFF"}


def package_build():
    """(directory, environment) of the build the .deb and the wheel share. The generator is pinned in
    the environment: CMake refuses a build directory configured with another one, and scikit-build-core
    would otherwise pick its own."""
    generator = os.environ.get("CMAKE_GENERATOR") or ("Ninja" if shutil.which("ninja") else "Unix Makefiles")
    env = dict(os.environ, CMAKE_GENERATOR=generator, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    return os.path.join(BUILD_DIR, "package-build"), env


def cache_value(build_dir, name):
    """A variable of a CMake cache, or '' when it is not set."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as cache:
            for line in cache:
                if line.startswith(name + ":"):
                    return line.split("=", 1)[1].strip()
    except FileNotFoundError:
        pass
    return ""


def compiler_launcher_args(prefix="-D"):
    """The main build's compiler launcher (ccache on a developer machine), so a packaging build does
    not recompile what the cache already holds; nothing when the main build has none (CI)."""
    launcher = cache_value(BUILD_DIR, "CMAKE_CXX_COMPILER_LAUNCHER")
    if not launcher:
        return []
    return [f"{prefix}CMAKE_CXX_COMPILER_LAUNCHER={launcher}", f"{prefix}CMAKE_C_COMPILER_LAUNCHER={launcher}"]


def check_version(ddprun, runner=()):
    out = run([*runner, ddprun, "--version"]).stdout.strip()
    if out != f"ddprun {VERSION}":
        fail(f"{' '.join(map(str, runner))} {ddprun} --version printed {out!r}, expected 'ddprun {VERSION}'")
    print(f"ok: {out}")


def check_two_rank_shell_job(ddprun, env=None):
    """Two workers, each printing its rank and world size: the environment contract end to end."""
    proc = run([ddprun, "--nproc_per_node=2", "/bin/sh", "-c", 'echo "worker rank=$RANK world=$WORLD_SIZE"'],
               env=env, timeout=60)
    found = sorted(re.findall(r"worker rank=(\d) world=(\d)", proc.stdout))
    if found != [("0", "2"), ("1", "2")]:
        fail(f"expected ranks 0 and 1 of 2, got {found}\n{proc.stdout}{proc.stderr}")
    print("ok: 2-rank shell job")


def python_has_torch(python):
    return subprocess.run([python, "-c", "import torch.distributed"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def check_two_rank_torch_job(ddprun, python=None, env=None, runner=()):
    """A real 2-rank gloo DDP job (tests/launcher/ddp_check.py) under the given ddprun."""
    argv = [*runner, ddprun, "--nproc_per_node=2"]
    if python:
        argv.append(f"--python={python}")
    proc = run([*argv, DDP_CHECK], env=env, timeout=300)
    reports = [json.loads(line.split("DDP_CHECK ", 1)[1]) for line in proc.stdout.splitlines()
               if "DDP_CHECK " in line]
    ranks = sorted(r["rank"] for r in reports)
    if ranks != [0, 1] or any(r["world"] != 2 or r["allreduce"] != 3.0 for r in reports):
        fail(f"expected a 2-rank all_reduce of 3.0, got {reports}\n{proc.stdout}{proc.stderr}")
    if reports[0]["weights"] != reports[1]["weights"]:
        fail(f"DDP weights differ between ranks: {reports}")
    print("ok: 2-rank torch job")


def man_text(argv):
    """What `man` prints, as plain text (overstrike bold/underline removed, 100 columns)."""
    env = {k: v for k, v in os.environ.items() if k != "MAN_KEEP_FORMATTING"}
    env["MANWIDTH"] = "100"
    return re.sub(r".\x08", "", run(argv, env=env).stdout)


def check_man_page_renders(page, name):
    """`man -l` renders the page: it has a NAME section naming the program."""
    out = man_text(["man", "-l", page])
    if "NAME" not in out or name not in out or "OPTIONS" not in out:
        fail(f"man -l {page} did not render a page for {name}:\n{out[:2000]}")
    print(f"ok: man -l {os.path.basename(page)}")
