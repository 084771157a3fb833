# SPDX-License-Identifier: MIT
"""The chaos harness's "nothing lost" check on training itself: every checkpoint an attempt saved
must equal a fault-free run of the same job resumed from the checkpoint that attempt started from
(the method of launcher.torch.elastic_resume_*, here replayed in one process).

An attempt is what rank 0 printed (chaos_train.py): `CHAOS START rank=0 world=W restart=R resume=C`,
then `CHAOS STEP step=N restart=R world=W` per step, and it saves ckpt/step_<N>.pt every
CKPT_EVERY steps. The replay loads step_<C>.pt (or builds the initial model when C is 0) and runs
N - C steps of W simulated ranks: rank r draws its batches from torch.Generator seeded 1234 + r from
the attempt's start, the gradients are averaged over the ranks (what DDP's all-reduce does) and
SGD steps. Gloo may sum the ranks in another order, so parameters are compared with a tolerance
far below any one step's change (a checkpoint from the wrong start, a lost step or a step taken
twice differs by orders of magnitude more).

A checkpoint is checked only when exactly one attempt printed its step and the attempt's start is
known: a node declared lost may still print (and save) for a moment after the others re-formed
(docs/reliability.md, the lost node's writer), and such a file has two possible authors.
Usage: checkpoints.py EPISODE_DIR... (exit 1 on a mismatch)."""
import glob
import os
import re
import sys

CKPT_EVERY = 10  # chaos_train.py
LR = 0.01
ATOL = 1e-5

START = re.compile(rb"CHAOS START rank=0 world=(\d+) restart=(\d+) resume=(\d+)")
STEP = re.compile(rb"CHAOS STEP step=(\d+) restart=(\d+) world=(\d+)")


def attempts(episode_dir):
    """{restart: {"world": W, "resume": C, "steps": set of steps}} from every agent's stdout."""
    found = {}
    for path in sorted(glob.glob(os.path.join(episode_dir, "node*.out"))):
        with open(path, "rb") as f:
            for line in f:
                if m := START.search(line):
                    a = found.setdefault(int(m[2]), {"world": None, "resume": None, "steps": set()})
                    a["world"], a["resume"] = int(m[1]), int(m[3])
                elif m := STEP.search(line):
                    a = found.setdefault(int(m[2]), {"world": None, "resume": None, "steps": set()})
                    a["steps"].add(int(m[1]))
    return found


def initial_model(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def replay(torch, start_state, world, steps):
    """The parameters after `steps` fault-free steps of `world` ranks from `start_state`."""
    net = initial_model(torch)
    if start_state is not None:
        net.load_state_dict(start_state)
    gens = [torch.Generator().manual_seed(1234 + r) for r in range(world)]
    params = list(net.parameters())
    for _ in range(steps):
        grads = [torch.zeros_like(p) for p in params]
        for g in gens:
            net.zero_grad()
            x = torch.randn(16, 8, generator=g)
            (net(x) - x.sum(dim=1, keepdim=True).tanh()).pow(2).mean().backward()
            for acc, p in zip(grads, params):
                acc += p.grad
        with torch.no_grad():
            for acc, p in zip(grads, params):
                p -= LR * (acc / world)
    return net.state_dict()


def check_episode(episode_dir, torch=None):
    """(checkpoints checked, [mismatch texts])."""
    if torch is None:
        import torch  # noqa: PLC0415 (the harness imports this module without torch)
    ckpt = os.path.join(episode_dir, "ckpt")
    found = attempts(episode_dir)
    authors = {}
    for restart, a in found.items():
        for step in a["steps"]:
            if step % CKPT_EVERY == 0:
                authors.setdefault(step, []).append(restart)
    checked, bad = 0, []
    for step, who in sorted(authors.items()):
        path = os.path.join(ckpt, f"step_{step:06d}.pt")
        if len(who) != 1 or not os.path.exists(path):
            continue
        a = found[who[0]]
        if a["world"] is None or a["resume"] is None or a["resume"] >= step:
            continue
        start = None
        if a["resume"]:
            start_path = os.path.join(ckpt, f"step_{a['resume']:06d}.pt")
            # The start's own author must be unique too, or it may not be what this attempt read.
            if len(authors.get(a["resume"], [])) != 1 or not os.path.exists(start_path):
                continue
            start = torch.load(start_path)["model"]
        expected = replay(torch, start, a["world"], step - a["resume"])
        saved = torch.load(path)["model"]
        checked += 1
        worst = max(float((expected[k] - saved[k]).abs().max()) for k in expected)
        if worst > ATOL:
            bad.append(f"{os.path.basename(episode_dir)}: step_{step:06d}.pt (attempt {who[0]}, world "
                       f"{a['world']}, resumed from step {a['resume']}) differs from a fault-free run "
                       f"from that checkpoint by {worst:.3g} (tolerance {ATOL})")
    return checked, bad


def main(argv):
    total, failures = 0, []
    for d in argv:
        checked, bad = check_episode(d)
        total += checked
        failures += bad
    for text in failures:
        print(text)
    print(f"{total} checkpoints checked in {len(argv)} episodes, {len(failures)} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
