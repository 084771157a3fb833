# SPDX-License-Identifier: MIT
"""The chaos harness's job: one elastic ddprun (or torchrun) job of torch gloo workers
(chaos_train.py), its agents (Agent: a process, its console read by a thread, its --events) and
an episode (Episode: a job from its start to its end, with the faults it took)."""
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import episode_tags
import invariants as inv

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "chaos_train.py")
# What chaos_train.py imports before its first step: torch, its process groups, and torch._dynamo
# (which torch.optim imports lazily, 2+ s here): preloaded, a restart costs a fork, and the first
# output line (a c10d warning) is not followed by seconds of imports that --hang-timeout counts.
PRELOAD = "torch,torch.distributed,torch.nn.parallel,torch._dynamo"
HEARTBEAT_TIMEOUT = 2
RDZV_CONF = (f"heartbeat_interval=0.3,heartbeat_timeout={HEARTBEAT_TIMEOUT},join_timeout=60,"
             "last_call_timeout=1")
MAX_RESTARTS = 6
TOKEN = "chaos-" + "%032x" % random.SystemRandom().getrandbits(128)
NPROC = 2
INITIAL_NODES = 3


class Agent:
    """One ddprun agent of an episode: stdout read by a thread (which can be told to stop reading,
    for console_stall) that timestamps the training's step lines."""

    def __init__(self, h, ep, slot, args):
        self.h, self.ep, self.slot = h, ep, slot
        self.name = f"{ep.id}/node{slot}#{len(ep.all_agents)}"
        base = os.path.join(ep.dir, f"node{slot}_{len(ep.all_agents)}")
        self.out_path, self.err_path, self.events = base + ".out", base + ".err", base + ".events"
        self.tmpdir = os.path.join(ep.dir, f"tmp{slot}_{len(ep.all_agents)}")
        os.makedirs(self.tmpdir)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC"))}
        env.update({episode_tags.VAR: ep.value})
        env.update(CHAOS_NODE=f"node{slot}", TMPDIR=self.tmpdir,
                   DDPRUN_RDZV_TOKEN=TOKEN, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                   GLOO_SOCKET_IFNAME=h.topology.ifname(slot))
        if ep.direct_store:
            env["CHAOS_DIRECT_STORE"] = ep.direct_store
        self.err = open(self.err_path, "w")
        command = ([sys.executable] if h.launcher == "torchrun" else
                   [h.ddprun, "--events", self.events, *h.preload])
        self.proc = subprocess.Popen(
            [*h.topology.prefix(slot), *command, *args],
            stdout=subprocess.PIPE, stderr=self.err, env=env, start_new_session=True)
        self.stall_until = 0.0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        pending = b""
        with open(self.out_path, "wb") as out:
            while True:
                while time.monotonic() < self.stall_until:
                    time.sleep(0.05)
                chunk = self.proc.stdout.read1(65536)
                if not chunk:
                    break
                out.write(chunk)
                now = time.monotonic()
                pending += chunk
                *lines, pending = pending.split(b"\n")
                pending = pending[-4096:]  # a line that never ends must not grow the harness
                for line in lines:
                    if b"CHAOS STEP" in line:
                        self.h.step_seen(now)

    def events_of(self, kind):
        try:
            with open(self.events) as f:
                return [e for e in (json.loads(l) for l in f if l.strip()) if e.get("event") == kind]
        except (OSError, ValueError):
            return []

    def alive(self):
        return self.proc.poll() is None

    def workers(self):
        """pids of this agent's workers in its newest attempt that are still alive."""
        if self.h.launcher == "torchrun":  # no events: the agent's live child processes
            return [pid for pid in children(self.proc.pid) if inv.proc_usage(pid)]
        starts = self.events_of("worker_start")
        if not starts:
            return []
        last = max(e["attempt"] for e in starts)
        return [e["pid"] for e in starts if e["attempt"] == last and inv.proc_usage(e["pid"])]

    def hosts_store(self):
        if self.h.launcher == "torchrun":  # the agent on the endpoint's address hosts it
            return self.slot == 0 and self is self.ep.agents.get(0)
        if self.h.mode == "etcd":  # each round's node 0 hosts that attempt's workers' store
            rounds = self.events_of("rendezvous")
            return bool(rounds) and rounds[-1].get("node_rank") == 0
        stores = self.events_of("store")
        return bool(stores) and stores[-1].get("role") == "host"

    def status_port(self):
        st = self.events_of("status")
        return st[-1]["port"] if st else None

    def stderr_text(self):
        with open(self.err_path, encoding="utf-8", errors="replace") as f:
            return f.read()


class Episode:
    """One job: started with INITIAL_NODES agents, ended by its faults (every agent exited) or by
    the harness (SIGTERM)."""

    def __init__(self, h, index):
        self.h, self.index = h, index
        self.id = f"ch{h.seed}e{index}"
        self.value = f"{self.id}-{os.getpid()}"
        self.tag = episode_tags.env_entry(self.value)
        self.dir = os.path.join(h.tmp, self.id)
        os.makedirs(os.path.join(self.dir, "ctl"))
        self.agents, self.all_agents, self.fault_types = {}, [], []
        self.terminated = False
        self.last_fault = None
        self.stopped = set()  # pids SIGSTOPped by a fault, SIGCONTed by its timer
        if h.mode == "c10d":
            self.endpoint = f"{h.topology.addr(0)}:{h.free_port(0)}"
            self.direct_store = self.endpoint
        else:
            self.endpoint = h.etcd.endpoints
            self.direct_store = None  # the workers' store moves with each attempt
        self.start_agent(0)
        if h.mode == "c10d" and h.launcher == "ddprun":
            h.wait(lambda: self.agents[0].hosts_store() or not self.agents[0].alive(), 30,
                   "the store on node 0")
        elif h.mode == "c10d":
            time.sleep(2)  # torchrun's host agent binds the endpoint once its interpreter is up
        for slot in range(1, INITIAL_NODES):
            self.start_agent(slot)

    def start_agent(self, slot):
        h = self.h
        backend = "c10d" if h.mode == "c10d" else "etcd"
        if h.launcher == "torchrun":
            # The same job under torchrun 2.15 (c10d only; no proxy, hang timeout, status port
            # or events: it has none).
            args = ["-m", "torch.distributed.run", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", self.endpoint, "--rdzv-id", self.id,
                    "--nnodes", f"2:{h.nodes}", "--nproc-per-node", NPROC,
                    "--local-addr", h.topology.addr(slot), "--max-restarts", MAX_RESTARTS,
                    "--monitor-interval", "0.1", "--rdzv-conf",
                    f"join_timeout=60,last_call_timeout=1,is_host={'1' if slot == 0 else '0'}",
                    TRAIN, self.dir]
            agent = Agent(h, self, slot, [str(a) for a in args])
            self.agents[slot] = agent
            self.all_agents.append(agent)
            return agent
        args = ["--rdzv_backend", backend, "--rdzv_endpoint", self.endpoint, "--rdzv_id", self.id,
                "--nnodes", f"2:{h.nodes}", "--nproc_per_node", NPROC,
                "--local_addr", h.topology.addr(slot), "--rdzv_conf", RDZV_CONF,
                "--max_restarts", MAX_RESTARTS, "--store-proxy", "on",
                "--hang-timeout", h.hang_timeout, "--hang-startup-timeout", 90,
                "--status-port", 0, "--status-addr", h.topology.addr(slot),
                TRAIN, self.dir]
        agent = Agent(h, self, slot, [str(a) for a in args])
        self.agents[slot] = agent
        self.all_agents.append(agent)
        return agent

    def live(self):
        return [a for a in self.agents.values() if a.alive()]

    def ended(self):
        return not self.live()

    def store_host(self):
        return next((a for a in self.live() if a.hosts_store()), None)

    def terminate(self):
        self.terminated = True
        for pid in list(self.stopped):
            signal_pid(pid, signal.SIGCONT)
        for a in self.live():
            signal_pid(a.proc.pid, signal.SIGTERM)


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def signal_pid(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
