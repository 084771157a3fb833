# SPDX-License-Identifier: MIT
"""Real PyTorch through an elastic re-form, checked to the bit: elastic_train.py (DDP, gloo, CPU,
a checkpoint per epoch) under 3 c10d agents at `2:3` around `ddprun --store-only` on 127.0.0.1.
Mid-epoch node 1's agent is SIGKILLed (its worker dies with it); the survivors re-form at 2 and
the script resumes from its newest checkpoint. The final state's sha256 must equal that of an
uninterrupted 2-node run started from a copy of the checkpoint the survivors resumed from (the
epoch they resumed from is read from the script's output), the survivors' workers must have gone
from WORLD_SIZE 3 to 2 with TORCHELASTIC_RESTART_COUNT 0 to >= 1, and one membership change.

Mode `spare` (issue 23 item 14): a hot spare under real DDP. Two agents at `2:2` train, a third
waits as a spare; one training agent is SIGKILLed mid-epoch. The survivor's workers fail in gloo
before any heartbeat is missed; the survivor must still take that for the loss it is and re-form
with the spare (not restart and wait for a second node that never comes), and the job finishes
with exit 0 and the same final state as an uninterrupted 2-node run from the checkpoint resumed.
Mode `etcd` (issue 21): the same re-form on `--rdzv_backend etcd` (a real 3-member etcd cluster,
the token set), where the agent killed is the round's node 0, the host of the workers' store: the
survivors re-form, a survivor hosts the next attempt's store, and the final state is bit-identical.
Usage: test_elastic_torch.py PYTHON [control|spare|etcd]
  PYTHON: /usr/bin/python3 (Debian's torch 1.13) or "default" (python3 on PATH, torch 2.x).
  control: also run the reference from the epoch before and require a different hash (shows
  that the comparison can fail)."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import clean_env, wait_until  # noqa: E402
import test_elastic as el  # noqa: E402
import test_multinode as mn  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "..", "support"))
from etcd_cluster import EtcdCluster, require_etcd  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "elastic_train.py")
EPOCHS = 4
KILL_AT = (2, 2)  # (epoch, step) of rank 0: two checkpoints written, epoch 2 (10 steps) under way


def train_lines(node):
    """[(kind, fields)] of the node's TRAIN lines (every attempt's), in order."""
    found = []
    for line in node.text()[0].splitlines():
        if "TRAIN " in line:
            kind, *kvs = line.split("TRAIN ", 1)[1].split()
            found.append((kind, dict(kv.split("=", 1) for kv in kvs)))
    return found


def newest(ckpt):
    """Epochs done by the newest complete checkpoint in CKPT (temporary files do not count)."""
    return max(int(n[len("epoch_"):-len(".pt")]) for n in os.listdir(ckpt)
               if n.startswith("epoch_") and n.endswith(".pt"))


def of(node, kind):
    return [f for k, f in train_lines(node) if k == kind]


# The spare test's heartbeats: a torch 2.x worker whose gloo peer died takes a few seconds to exit
# after its error, so with the usual 2 s the heartbeat would win the race that issue 23 item 14 is
# about. With 8 s (the real default is 5 s) the worker's failure reliably comes first.
SLOW_HEARTBEAT = "heartbeat_interval=0.5,heartbeat_timeout=8,join_timeout=30,last_call_timeout=1"


def agents(tmp, port, count, nnodes, ckpt, py, rdzv_id, first=0, conf=el.FAST, etcd=None):
    """c10d agents around the store at PORT, or etcd agents (with a token) when ETCD (endpoints)."""
    rdzv = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}"]
    env = None
    if etcd:
        rdzv = ["--rdzv_backend", "etcd", "--rdzv_endpoint", etcd, "--local_addr", "127.0.0.1",
                "--master_port", 0]
        env = clean_env(DDPRUN_RDZV_TOKEN="elastic-etcd-token")
    args = [*rdzv, "--rdzv_id", rdzv_id, "--nnodes", nnodes, "--nproc_per_node", 1,
            "--rdzv_conf", conf, "--max_restarts", 3, *py, SCRIPT, ckpt, EPOCHS]
    return [mn.Node(tmp, f"{rdzv_id}{k}", args, env=env) for k in range(first, first + count)]


def reference(tmp, py, checkpoint, name):
    """An uninterrupted 2-node run started from a copy of CHECKPOINT; returns its final hash."""
    ckpt = os.path.join(tmp, name)
    os.makedirs(ckpt)
    shutil.copy(checkpoint, ckpt)
    store = el.Store()
    nodes = agents(tmp, store.port, 2, "2", ckpt, py, name)
    try:
        assert mn.finish(nodes, timeout=120) == [0, 0], nodes
    finally:
        mn.finish(nodes, timeout=30)
        store.close()
    starts = [f for n in nodes for f in of(n, "START")]
    resumed = int(os.path.basename(checkpoint)[len("epoch_"):-len(".pt")])
    assert len(starts) == 2 and all(f["world"] == "2" and f["resume"] == str(resumed) for f in starts), nodes
    with open(os.path.join(ckpt, "final.sha256")) as f:
        return f.read().strip()


def elastic_run(tmp, py, etcd=None):
    """c10d: node 1's agent is killed. etcd (ETCD: the cluster): node 0's, the agent hosting the
    workers' store of the attempt, so the survivors also need a new store host."""
    ckpt = os.path.join(tmp, "elastic")
    os.makedirs(ckpt)
    store = None if etcd else el.Store()
    nodes = agents(tmp, store.port if store else 0, 3, "2:3", ckpt, py, "el",
                   etcd=etcd.endpoints if etcd else None)
    victim_rank = 0 if etcd else 1
    try:
        wait_until(lambda: len([n for n in nodes if of(n, "START")]) == 3, 60, "3 workers training")
        node0 = next(n for n in nodes if el.group_rank(n, 0) == 0)
        wait_until(lambda: {"epoch": str(KILL_AT[0]), "step": str(KILL_AT[1])} in of(node0, "STEP"), 60,
                   f"rank 0 at epoch {KILL_AT[0]} step {KILL_AT[1]}")
        victim = next(n for n in nodes if el.group_rank(n, 0) == victim_rank)
        killed_at = el.kill_agent(victim)
        newest_at_kill = newest(ckpt)
        survivors = [n for n in nodes if n is not victim]
        wait_until(lambda: all(len(of(n, "START")) >= 2 for n in survivors), 60, "re-formed workers")
        back_at = time.monotonic()
        assert mn.finish(survivors, timeout=120) == [0, 0], survivors
    finally:
        mn.finish(nodes, timeout=30)
        if store:
            store.close()
    for node in survivors:
        first, last = of(node, "START")[0], of(node, "START")[-1]
        assert first["world"] == "3" and first["restart"] == "0", node
        assert last["world"] == "2" and int(last["restart"]) > 0, node
        # Real DDP workers fail first (their collectives break), so this is usually the restart
        # given back as a re-form, else a re-form on the lost heartbeat: the same fields either way.
        rescale = el.one_rescale(node)
        assert rescale["old_world_size"] == 3 and rescale["new_world_size"] == 2, node
        assert rescale["old_num_nodes"] == 3 and rescale["new_num_nodes"] == 2, node
        assert rescale["seconds"] > 0, node
        assert len(el.events(node, "summary")[-1]["membership_changes"]) == 1, node
    assert of(victim, "START")[0]["world"] == "3", victim
    if etcd:  # a new workers' store, hosted by a survivor
        assert len({of(n, "START")[-1]["master"] for n in survivors}) == 1, survivors
        assert of(survivors[0], "START")[-1]["master"] != of(victim, "START")[0]["master"], victim
    rank0 = next(n for n in survivors if of(n, "START")[-1]["rank"] == "0")
    resumed = int(of(rank0, "START")[-1]["resume"])
    # The newest checkpoint (a loaded machine may let rank 0 finish the epoch before the kill lands).
    assert newest_at_kill >= KILL_AT[0] and newest_at_kill <= resumed < EPOCHS, (newest_at_kill, rank0)
    done = of(rank0, "DONE")
    assert len(done) == 1 and done[0]["world"] == "2", rank0
    with open(os.path.join(ckpt, "final.sha256")) as f:
        digest = f.read().strip()
    assert digest == done[0]["hash"], rank0
    restarts = sorted({of(n, "START")[-1]["restart"] for n in survivors})
    how = el.events(survivors[0], "rescale")[0]
    print(f"  kill -> survivors' workers training again: {back_at - killed_at:.2f} s ({how['reason']}; "
          f"re-formed in {how['seconds']:.2f} s); resumed "
          f"from epoch {resumed} at world size 2, TORCHELASTIC_RESTART_COUNT 0 -> {','.join(restarts)}")
    return ckpt, resumed, digest


def kill_machine(node):
    """SIGKILL the agent and its workers at once, as when their machine vanishes: the peers'
    collectives fail at once, long before the agent's heartbeats are missed."""
    workers = [e["pid"] for e in el.events(node, "worker_start")]
    killed_at = el.kill_agent(node)
    for pid in workers:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return killed_at


def spare_run(tmp, py):
    ckpt = os.path.join(tmp, "spare")
    os.makedirs(ckpt)
    store = el.Store()
    nodes = agents(tmp, store.port, 2, "2:2", ckpt, py, "sp", conf=SLOW_HEARTBEAT)
    spare = None
    try:
        wait_until(lambda: len([n for n in nodes if of(n, "START")]) == 2, 60, "2 workers training")
        spare = agents(tmp, store.port, 1, "2:2", ckpt, py, "sp", first=2, conf=SLOW_HEARTBEAT)[0]
        wait_until(lambda: el.events(spare, "spare"), 60, "the third agent waiting as a spare")
        node0 = next(n for n in nodes if el.group_rank(n, 0) == 0)
        wait_until(lambda: {"epoch": str(KILL_AT[0]), "step": str(KILL_AT[1])} in of(node0, "STEP"), 60,
                   f"rank 0 at epoch {KILL_AT[0]} step {KILL_AT[1]}")
        victim = next(n for n in nodes if el.group_rank(n, 0) == 1)
        killed_at = kill_machine(victim)
        newest_at_kill = newest(ckpt)
        # Without the spare swap the survivor restarts and waits for a second node until its join
        # timeout (30 s), then exits 69; the spare is never admitted.
        wait_until(lambda: len(of(node0, "START")) >= 2 and of(spare, "START"), 90,
                   "the survivor's and the spare's workers")
        back_at = time.monotonic()
        everyone = [node0, spare]
        assert mn.finish(everyone, timeout=120) == [0, 0], everyone
    finally:
        mn.finish(nodes + ([spare] if spare else []), timeout=30)
        store.close()
    assert of(victim, "START")[0]["world"] == "2", victim
    assert len(of(spare, "START")) == 1 and of(spare, "START")[0]["world"] == "2", spare
    assert el.group_rank(spare, int(of(spare, "START")[0]["restart"])) == 1, spare
    last = of(node0, "START")[-1]
    assert last["world"] == "2" and int(last["restart"]) > 0, node0
    rescale = el.events(node0, "rescale")
    assert len(rescale) == 1 and rescale[0]["change"] == "spare", node0
    assert rescale[0]["old_world_size"] == 2 and rescale[0]["new_world_size"] == 2, node0
    assert not el.events(node0, "restart"), node0  # a re-form, not a worker failure's restart
    # The race this test is about: the survivor's worker failed before the loss was reported.
    lost_at = el.events(node0, "node_lost")[0]["time"]
    failed = [e for e in el.events(node0, "worker_exit") if e["attempt"] == 0]
    assert failed and failed[0]["time"] < lost_at and not failed[0].get("terminated_by_ddprun"), node0
    rank0 = next(n for n in everyone if of(n, "START")[-1]["rank"] == "0")
    resumed = int(of(rank0, "START")[-1]["resume"])
    assert newest_at_kill >= KILL_AT[0] and newest_at_kill <= resumed < EPOCHS, (newest_at_kill, rank0)
    done = of(rank0, "DONE")
    assert len(done) == 1 and done[0]["world"] == "2", rank0
    with open(os.path.join(ckpt, "final.sha256")) as f:
        digest = f.read().strip()
    assert digest == done[0]["hash"], rank0
    print(f"  kill -> survivor's and spare's workers training: {back_at - killed_at:.2f} s "
          f"({rescale[0]['reason']}); resumed from epoch {resumed} at world size 2")
    return ckpt, resumed, digest


def checked(tmp, py, mode, t0):
    if mode == "etcd":
        with EtcdCluster(3) as cluster:
            ckpt, resumed, digest = elastic_run(tmp, py, etcd=cluster)
    else:
        ckpt, resumed, digest = spare_run(tmp, py) if mode == "spare" else elastic_run(tmp, py)
    t1 = time.monotonic()
    expected = reference(tmp, py, os.path.join(ckpt, f"epoch_{resumed:03d}.pt"), "ref")
    assert digest == expected, (digest, expected)
    print(f"  final state sha256 {digest[:16]}… = the uninterrupted 2-node run's from epoch {resumed} "
          f"(elastic run {t1 - t0:.1f} s, reference {time.monotonic() - t1:.1f} s)")
    if mode == "control":
        other = reference(tmp, py, os.path.join(ckpt, f"epoch_{resumed - 1:03d}.pt"), "control")
        assert other != digest, other
        print(f"  control: from epoch {resumed - 1} instead the hash differs ({other[:16]}…)")


def main():
    python = sys.argv[1]
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    if mode not in ("", "control", "spare", "etcd"):
        sys.exit(f"usage: {sys.argv[0]} PYTHON [control|spare|etcd]")
    if mode == "etcd":
        require_etcd()
    interpreter = "python3" if python == "default" else python
    if not shutil.which(interpreter) or subprocess.run(
            [interpreter, "-c", "import torch.distributed"], capture_output=True).returncode != 0:
        print(f"SKIP: {interpreter} cannot import torch.distributed")
        sys.exit(77)
    py = [] if python == "default" else ["--python", python]
    version = subprocess.run([interpreter, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ddprun_eltorch_") as tmp:
        try:
            checked(tmp, py, mode, t0)
        except Exception:  # reported here: the nodes' logs are gone once tmp is
            traceback.print_exc()
            sys.exit(1)
    what = {"spare": "a spare replaces a lost node 2 -> 2",
            "etcd": "etcd: the store's host lost, elastic re-form 3 -> 2 with a new store"}.get(
                mode, "elastic re-form 3 -> 2")
    print(f"PASS torch {version}: {what}, resumed bit-identically ({time.monotonic() - t0:.1f} s)")


if __name__ == "__main__":
    main()
