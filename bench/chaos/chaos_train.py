# SPDX-License-Identifier: MIT
"""The chaos harness's worker: a plain torchrun-style DDP script (torch, gloo, CPU) that
checkpoints every few steps and survives re-forms, plus the side client whose history the harness
checks, plus the hooks through which the harness makes a rank misbehave.

Usage: chaos_train.py CHAOS_DIR
* Training: a small MLP on synthetic data, one intra-op thread, SGD; rank 0 saves
  CHAOS_DIR/ckpt/step_<NNNNNN>.pt atomically every CKPT_EVERY steps; every rank resumes from the
  newest complete one. Each step sends `step N` to DDPRUN_HEARTBEAT_SOCKET and rank 0 prints
  `CHAOS STEP step=N restart=R world=W` (N counts from the start of the job, across re-forms).
* Side client (local rank 0 of every node, a thread): SET / ADD / COMPARE_SET / GET / WAIT on keys
  of its own through MASTER_ADDR:MASTER_PORT (the node's store proxy when it is on) and, when
  CHAOS_DIRECT_STORE=host:port is set, directly against the store. One JSON line per operation in
  CHAOS_DIR/history/<host>-<pid>.jsonl: {"c": conn, "op", "key", "arg", "ok", "ret", "t0", "t1"}.
* Hooks, polled every step: CHAOS_DIR/ctl/<tag>.<name> where tag is `node<N>.local<L>` (CHAOS_NODE,
  LOCAL_RANK): `hang` sleeps forever without heartbeats (a hung rank); `daemon` double-forks a
  setsid'd daemon that outlives the worker unless the launcher kills it. Each is consumed once.
"""
import datetime
import json
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist

from episode_tags import VAR as EPISODE_VAR, spawn_daemon

# The checkpoint writer of the elastic tests (temporary file, fsync, rename, fsync of the directory).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "launcher"))
from elastic_train import atomic_save  # noqa: E402

CKPT_EVERY = 10
STEP_SLEEP = 0.05
TOTAL_STEPS = 10**7  # the harness ends the job


def newest(ckpt_dir):
    steps = [int(n[len("step_"):-len(".pt")]) for n in os.listdir(ckpt_dir)
             if n.startswith("step_") and n.endswith(".pt")]
    return max(steps, default=0)


def hook(ctl, tag, name):
    path = os.path.join(ctl, f"{tag}.{name}")
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


class SideClient(threading.Thread):
    """One writer per key: the harness checks that acknowledged writes are read back and that no
    read goes back in time or returns a value never written."""

    def __init__(self, chaos_dir, addr, conn):
        super().__init__(daemon=True)
        self.addr, self.conn = addr, conn
        host = socket.gethostname()
        os.makedirs(os.path.join(chaos_dir, "history"), exist_ok=True)
        self.out = open(os.path.join(chaos_dir, "history", f"{host}-{os.getpid()}-{conn}.jsonl"), "a")
        self.prefix = f"/chaos/{os.environ.get('CHAOS_NODE', host)}/{os.getpid()}/{conn}"

    def log(self, op, key, arg, ok, ret, t0):
        self.out.write(json.dumps({"c": self.conn, "op": op, "key": key, "arg": arg, "ok": ok,
                                   "ret": ret, "t0": t0, "t1": time.time()}) + "\n")
        self.out.flush()

    def run(self):
        host, port = self.addr.rsplit(":", 1)
        try:
            store = dist.TCPStore(host, int(port), is_master=False,
                                  timeout=datetime.timedelta(seconds=10))
        except Exception as e:  # the store may already be gone: nothing to check then
            self.log("connect", "", "", False, str(e)[:200], time.time())
            return
        n = 0
        while True:
            n += 1
            for op, key, arg, call in (
                    ("set", f"{self.prefix}/reg", n, lambda k, a: store.set(k, str(a))),
                    ("get", f"{self.prefix}/reg", None, lambda k, a: int(store.get(k))),
                    ("add", f"{self.prefix}/ctr", 1, lambda k, a: store.add(k, a)),
                    ("cas", f"{self.prefix}/cas", n, lambda k, a: int(store.compare_set(
                        k, str(a - 1) if a > 1 else "", str(a)))),
                    ("wait", f"{self.prefix}/reg", None,
                     lambda k, a: store.wait([k], datetime.timedelta(seconds=5)))):
                t0 = time.time()
                try:
                    ret = call(key, arg)
                except Exception as e:
                    self.log(op, key, arg, False, str(e)[:200], t0)
                    return  # a broken connection stays broken: the history ends here
                self.log(op, key, arg, True, ret, t0)
            time.sleep(0.05)


def main():
    chaos_dir = sys.argv[1]
    ckpt_dir, ctl = os.path.join(chaos_dir, "ckpt"), os.path.join(chaos_dir, "ctl")
    os.makedirs(ckpt_dir, exist_ok=True)
    torch.set_num_threads(1)
    # The workload's own bound on meeting its peers and on each collective. It must outlast an
    # exec'd start on a loaded machine (a rank whose zygote a fault killed imports torch itself:
    # 30-45 s at load 18, where 30 s failed forked peers waiting in init_process_group, seed 36)
    # and stay under the harness's recovery bound (RESTART_BOUND, 75 s), so that a peer that never
    # comes still fails the attempt inside it. ddprun's own hang verdict (--hang-timeout 20 after
    # the start) judges a stalled collective before this fires.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["LOCAL_RANK"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    tag = f"{os.environ.get('CHAOS_NODE', 'node')}.local{local}"
    episode = os.environ.get(EPISODE_VAR, "")
    if local == 0:
        SideClient(chaos_dir, f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", "via").start()
        if os.environ.get("CHAOS_DIRECT_STORE"):
            SideClient(chaos_dir, os.environ["CHAOS_DIRECT_STORE"], "direct").start()
    hb = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    hb.setblocking(False)
    hb_path = os.environ.get("DDPRUN_HEARTBEAT_SOCKET")

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    done = newest(ckpt_dir)
    if done:
        state = torch.load(os.path.join(ckpt_dir, f"step_{done:06d}.pt"))
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    model = torch.nn.parallel.DistributedDataParallel(net)
    g = torch.Generator().manual_seed(1234 + rank)
    print(f"CHAOS START rank={rank} world={world} restart={restart} resume={done}", flush=True)
    for step in range(done + 1, TOTAL_STEPS):
        if hook(ctl, tag, "hang"):
            print(f"CHAOS HANG rank={rank}", flush=True)
            while True:
                time.sleep(3600)
        if hook(ctl, tag, "daemon"):
            spawn_daemon(episode)
        x = torch.randn(16, 8, generator=g)
        loss = (model(x) - x.sum(dim=1, keepdim=True).tanh()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if hb_path:
            try:
                hb.sendto(b"step %d" % step, hb_path)
            except OSError:
                pass
        if rank == 0:
            print(f"CHAOS STEP step={step} restart={restart} world={world}", flush=True)
            if step % CKPT_EVERY == 0:
                atomic_save({"model": net.state_dict(), "optimizer": opt.state_dict()},
                            os.path.join(ckpt_dir, f"step_{step:06d}.pt"))
        time.sleep(STEP_SLEEP)


if __name__ == "__main__":
    main()
