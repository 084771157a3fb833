# SPDX-License-Identifier: MIT
"""The chaos schedule: a pure function of (seed, number of faults, fault types), written to and
read from JSON so that `--replay` reruns a schedule exactly."""
import json
import random

# Every fault type, what it does, and the modes in which it applies.
FAULT_TYPES = {
    "worker_kill": "SIGKILL of one worker",
    "agent_kill": "SIGKILL of one agent that does not host the workers' store",
    "store_host_kill": "SIGKILL of the agent hosting the workers' store",
    "worker_stop": "SIGSTOP of one worker for a random time, then SIGCONT",
    "agent_stop": "SIGSTOP of one agent (not the store's host) for a random time, then SIGCONT",
    "store_host_stop": "SIGSTOP of the store host's agent for a random time, then SIGCONT",
    "link_cut": "one node's link down for a random time, then up (network namespaces only)",
    "late_node": "a new node arrives (admitted, or waits as a spare)",
    "hang": "a rank hangs (sleeps without heartbeats) past --hang-timeout",
    "daemon": "a worker double-forks a setsid'd daemon",
    "stranger": "garbage and valid-looking requests to the store and status ports, no token",
    "console_stall": "the reader of one agent's console stops reading for a while",
    "etcd_kill": "SIGKILL of one etcd member (restarted later)",
    "etcd_leader_kill": "SIGKILL of the etcd leader (restarted later)",
    "etcd_stop": "SIGSTOP of one etcd member for a random time, then SIGCONT",
    "etcd_compact": "etcd's history compacted at its current revision (what auto-compaction does)",
    "etcd_black_hole": "one etcd member's front accepts and never answers for a random time",
    "etcd_5xx": "one etcd member's front answers HTTP 503 for a random time",
    "zygote_kill": "SIGKILL of one agent's preloaded interpreter (--preload only)",
    "zygote_stop": "SIGSTOP of one agent's preloaded interpreter for a random time, then SIGCONT "
                   "(--preload only)",
}
NETNS_ONLY = {"link_cut"}
ETCD_ONLY = {"etcd_kill", "etcd_leader_kill", "etcd_stop", "etcd_compact", "etcd_black_hole",
             "etcd_5xx"}
PRELOAD_ONLY = {"zygote_kill", "zygote_stop"}


def types_for(mode, netns, preload=False):
    return [t for t in FAULT_TYPES
            if (netns or t not in NETNS_ONLY) and (mode == "etcd" or t not in ETCD_ONLY)
            and (preload or t not in PRELOAD_ONLY)]


def generate(seed, faults, types):
    """N faults: type, a pick (which target among those alive when it is injected), a gap before
    it, a duration (stops, cuts, stalls) and whether it overlaps the previous fault's recovery."""
    rng = random.Random(seed)
    out = []
    for i in range(faults):
        kind = rng.choice(types)
        out.append({
            "index": i,
            "type": kind,
            "pick": rng.randrange(1 << 30),
            "gap": round(rng.uniform(0.2, 3.0), 2),
            "duration": round(rng.uniform(0.5, 6.0), 2),
            "overlap": i > 0 and rng.random() < 0.25,
        })
    return out


def save(path, seed, mode, netns, schedule, **job):
    """JOB: what else the replay must reproduce (nodes, hang_timeout)."""
    with open(path, "w") as f:
        json.dump({"seed": seed, "mode": mode, "netns": netns, **job, "faults": schedule}, f,
                  indent=1)


def load(path):
    """A written schedule. Besides what save() writes, a replay file may pin `expect_exit`: the
    exit codes every agent that ends by itself must end with (sharper than the codes any of its
    faults can explain: the regression it guards)."""
    with open(path) as f:
        doc = json.load(f)
    pinned = doc.get("expect_exit")
    if pinned is not None and not (isinstance(pinned, list)
                                   and all(isinstance(c, int) for c in pinned)):
        raise ValueError(f"{path}: expect_exit must be a list of exit codes")
    for k, fault in enumerate(doc["faults"]):
        if fault.get("type") not in FAULT_TYPES:
            raise ValueError(f"{path}: fault {k}: unknown type {fault.get('type')!r}")
    return doc
