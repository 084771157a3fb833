# SPDX-License-Identifier: MIT
"""How the harness recognises an episode's processes once the episode is over: every agent and
worker carries CHAOS_EPISODE=<value> in its environment, and a daemon a worker leaves behind
carries chaos-daemon-<value> on its command line (a daemon may clear its environment).
invariants.leftover_processes looks for both; one module so that the names cannot drift apart
(they once did: the value was itself `CHAOS_EPISODE=...` and the daemon's `sleep` refused its
tag, so the check matched nothing)."""
import os

VAR = "CHAOS_EPISODE"


def env_entry(value):
    """The environment entry, as /proc/<pid>/environ lists it."""
    return f"{VAR}={value}"


def daemon_name(value):
    return f"chaos-daemon-{value}"


def spawn_daemon(value):
    """A grandchild that leaves the caller's process group and session, named daemon_name(value)
    (its argv[0]): only the launcher's subreaper/cgroup cleanup can end it."""
    if os.fork() == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", [daemon_name(value), "3600"])
        finally:
            os._exit(0)
    os.wait()
