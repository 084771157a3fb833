# SPDX-License-Identifier: MIT
"""The chaos harness's checks, each a pure function of what was observed (files, /proc readings),
returning a list of violation texts (empty: the invariant held)."""
import json
import os
import re

# Exit codes a node may end with, by the fault that can cause them (docs/launcher.md): 74 a lost
# node or store, 75 a hang verdict, 128+9 a SIGKILLed worker once the restarts are spent, 69 a
# rendezvous that cannot complete (etcd without quorum, a join that times out after a partition).
CODES_BY_FAULT = {
    "worker_kill": {137},
    "agent_kill": {74},
    "store_host_kill": {74},
    "worker_stop": {75, 137},
    "agent_stop": {74},
    "store_host_stop": {74},
    "link_cut": {74, 69},
    "late_node": {69},
    "hang": {75},
    "daemon": set(),
    "stranger": set(),
    "console_stall": set(),
    "etcd_kill": {69, 74},
    "etcd_leader_kill": {69, 74},
    "etcd_stop": {69, 74},
    "etcd_compact": set(),  # a compaction ends no job
    "etcd_black_hole": set(),  # nor does one sick member of three
    "etcd_5xx": set(),
    # A killed or stopped zygote ends no job: the workers of that start are exec'd
    # (docs/warm-start.md: never a failed job, never exit 70).
    "zygote_kill": set(),
    "zygote_stop": set(),
}
# What the "Root cause" block must mention for each code.
ROOT_CAUSE_WORDS = {74: ("lost",), 75: ("hang", "hung", "no progress"), 137: ("SIGKILL",),
                    69: ("rendezvous", "etcd", "join", "store")}
TERMINATED = {143, 130}  # the harness's own SIGTERM at the end of a run


def allowed_codes(fault_types, terminated):
    codes = set().union(*(CODES_BY_FAULT[t] for t in fault_types)) if fault_types else set()
    return codes | (TERMINATED if terminated else set())


def check_exit(name, code, stderr_text, fault_types, terminated, pinned=None):
    """A node's end: its code is one the injected faults can cause (or, for a replay that pins
    them, one of PINNED), and its root cause says so."""
    if code is None:
        return [f"{name}: still running at the end of its episode"]
    if code < 0:  # killed by the harness itself (agent_kill, store_host_kill): nothing to check
        return []
    allowed = allowed_codes(fault_types, terminated)
    if pinned is not None:
        allowed = set(pinned) | (TERMINATED if terminated else set())
    if code not in allowed:
        return [f"{name}: exit {code}, expected one of {sorted(allowed)}"
                f"{' (pinned by the replay)' if pinned is not None else ''} for faults "
                f"{sorted(set(fault_types))}; stderr tail: {stderr_text[-600:]!r}"]
    words = ROOT_CAUSE_WORDS.get(code)
    if words and not any(w.lower() in stderr_text.lower() for w in words):
        return [f"{name}: exit {code} but its output names no {'/'.join(words)}: "
                f"{stderr_text[-600:]!r}"]
    return []


# ddprun events (--events) that begin the end of an attempt: after the first of them, the next
# round may form and delete the workers' keys.
ATTEMPT_END_EVENTS = ("node_lost", "loss_verdict", "restart", "rescale", "rendezvous")


def check_history(path, attempt_ends=()):
    """One side client's operations, in the order it made them, on keys only it writes: every
    acknowledged write is read back, counters count, nothing goes back in time. ATTEMPT_ENDS:
    wall-clock times of ATTEMPT_END_EVENTS; the check covers the client's own attempt, up to the
    first of them after it began (then ddprun may delete the workers' keys: docs/launcher.md)."""
    problems = []
    until = None
    last_set = None
    counter = 0
    cas = 0
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        return [f"{path}: {e}"]
    for n, line in enumerate(lines):
        try:
            op = json.loads(line)
        except ValueError:
            if n == len(lines) - 1:
                break  # the writer was killed mid-line
            return [f"{path}:{n + 1}: not JSON: {line[:100]!r}"]
        if until is None:
            until = min((t for t in attempt_ends if t > op["t0"]), default=float("inf"))
        if op["t1"] >= until:
            break  # the attempt was ending: the next round may have deleted its keys
        if not op["ok"]:
            break  # the connection broke: what follows was never acknowledged
        kind, ret = op["op"], op["ret"]
        if kind == "set":
            last_set = op["arg"]
        elif kind == "get" and ret != last_set:
            problems.append(f"{path}:{n + 1}: get returned {ret}, the last acknowledged set was "
                            f"{last_set}")
        elif kind == "add":
            counter += 1
            if ret != counter:
                problems.append(f"{path}:{n + 1}: add returned {ret}, expected {counter}")
        elif kind == "cas":
            cas += 1
            if ret != cas:
                problems.append(f"{path}:{n + 1}: compare_set returned {ret}, expected {cas}")
    return problems


def leftover_processes(episode_tag, daemon_tag):
    """Live processes that belong to an episode: its tag in their environment, or the daemon's
    tag on their command line (a daemon may clear its environment)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            if stat[stat.rindex(")") + 2] in "ZX":
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError):
            continue
        if episode_tag.encode() in env.split(b"\0") or daemon_tag.encode() in cmd:
            shown = cmd.replace(b"\0", b" ")[:120].decode(errors="replace")
            found.append(f"pid {entry}: {shown}")
    return found


def leftover_cgroups(agent_pids, root="/sys/fs/cgroup/unified"):
    found = []
    prefixes = tuple(f"ddprun-{pid}-" for pid in agent_pids)
    if not prefixes or not os.path.isdir(root):
        return found
    for dirpath, dirnames, _ in os.walk(root):
        for d in dirnames:
            if d.startswith(prefixes):
                found.append(os.path.join(dirpath, d))
    return found


KEPT_LINE = re.compile(r"worker logs and stacks: (\S+)")


def kept_dirs(stderr_text):
    """The directories ddprun announced it keeps (a hang verdict's stacks, docs/health.md): they
    are the user's to read, not leftovers."""
    return [os.path.normpath(m) for m in KEPT_LINE.findall(stderr_text)]


def leftover_files(dirs, kept=()):
    """ddprun's run directories left in the agents' TMPDIRs (what the workers themselves leave
    there, e.g. torch's compile cache, is theirs), except those holding an announced kept one."""
    found = []
    for d in dirs:
        if os.path.isdir(d):
            for n in os.listdir(d):
                path = os.path.join(d, n)
                if n.startswith("ddprun") and not any(
                        k == path or k.startswith(path + os.sep) for k in kept):
                    found.append(path)
    return found


def proc_usage(pid):
    """(rss KiB, fds, threads) of a live process, or None."""
    try:
        rss = threads = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return rss, fds, threads
    except (OSError, ValueError):
        return None
