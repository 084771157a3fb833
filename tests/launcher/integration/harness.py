# SPDX-License-Identifier: MIT
"""Shared helpers for ddprun's integration tests: run ddprun for real, find leftover processes.

Every ddprun started here runs in its own session; whatever happens, the session's process group
is SIGKILLed when the helper returns, so a failing test never leaves processes behind.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

DDPRUN = os.environ.get("DDPRUN", "ddprun")
BIN = os.environ.get("HELPER_BIN", os.path.dirname(DDPRUN))


def helper(name):
    return os.path.join(BIN, name)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("OMP_NUM_THREADS", None)
    # The caller's output settings must not change what the tests read (issue 11).
    env.pop("NO_COLOR", None)
    env.pop("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Run:
    def __init__(self, rc, out, err, elapsed):
        self.rc, self.out, self.err, self.elapsed = rc, out, err, elapsed

    def __repr__(self):
        return f"rc={self.rc}\n--- stdout ---\n{self.out[-3000:]}\n--- stderr ---\n{self.err[-3000:]}"


def run(args, timeout=60, env=None, cwd=None):
    """Runs ddprun ARGS to completion (bounded), returns a Run."""
    start = time.monotonic()
    proc = subprocess.Popen([DDPRUN] + [str(a) for a in args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env or clean_env(), cwd=cwd,
                            start_new_session=True, text=True, errors="replace")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"ddprun did not finish within {timeout}s\n{Run(None, out, err, 0)}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return Run(proc.returncode, out, err, time.monotonic() - start)


def start(args, env=None, stdout=subprocess.PIPE, stderr=subprocess.PIPE):
    """Starts ddprun in the background (its own session); the caller must stop() it."""
    return subprocess.Popen([DDPRUN] + [str(a) for a in args], stdout=stdout, stderr=stderr,
                            env=env or clean_env(), start_new_session=True, text=True,
                            errors="replace")


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def proc_stat(pid):
    """(state, ppid, pgrp) of a live process, or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[0], int(fields[1]), int(fields[2])


def group_members(pgid):
    """Live (non-zombie) processes whose process group is pgid."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st and st[2] == pgid:
                members.append(int(entry))
    return members


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for: {what}")


def wait_for_files(paths, timeout=20):
    wait_until(lambda: all(os.path.exists(p) for p in paths), timeout, f"files {paths}")


def read_ids(path):
    with open(path) as f:
        pid, pgid = f.read().split()
    return int(pid), int(pgid)


def assert_all_gone(pids, pgids, timeout=5):
    """Every pid is dead (or a zombie) and every process group is empty."""
    wait_until(lambda: all(proc_stat(p) is None for p in pids) and
               all(not group_members(g) for g in pgids), timeout,
               f"pids {pids} and groups {pgids} to be gone; alive: "
               f"{[p for p in pids if proc_stat(p)]}, members: {[group_members(g) for g in pgids]}")


def kill_ids(pids, pgids):
    for g in pgids:
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def ddprun_lines(text):
    return [l for l in text.splitlines() if l.startswith("ddprun:")]


def read_events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Skip(Exception):
    """Raised by a test that cannot run on this machine (a missing permission)."""


def main(namespace):
    """Runs every test_* function of the calling module (or those named on the command line).
    Exits 77 (skipped) only when every test raised Skip."""
    names = sys.argv[1:] or sorted(n for n in namespace if n.startswith("test_"))
    failed = []
    skipped = []
    for name in names:
        t0 = time.monotonic()
        failure = None
        try:
            with tempfile.TemporaryDirectory(prefix="ddprun_it_") as tmp:
                try:
                    namespace[name](tmp)
                except Skip:
                    raise
                except Exception:
                    # Formatted here: an assertion's message often reads the test's files
                    # (a node's output), which are gone once the directory is.
                    failure = traceback.format_exc()
        except Skip as why:
            skipped.append(name)
            print(f"SKIP {name}: {why}", flush=True)
            continue
        if failure:
            failed.append(name)
            print(f"FAIL {name}\n{failure}", flush=True)
        else:
            print(f"PASS {name} ({time.monotonic() - t0:.2f}s)", flush=True)
    if failed:
        print("failed:", " ".join(failed))
        sys.exit(1)
    if skipped and len(skipped) == len(names):
        sys.exit(77)
