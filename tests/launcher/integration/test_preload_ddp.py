# SPDX-License-Identifier: MIT
"""--preload gives the same training as exec'd workers, bit for bit (issue 35, "done when";
docs/warm-start.md): a 4-rank gloo DDP job with fixed seeds, checkpoints and two restarts (rank 1
fails once with sys.exit(3), once with an uncaught exception) ends with the same parameters, to
the last bit, exec'd and forked from `--preload torch`.

Run: python3 test_preload_ddp.py [test_name...]   (DDPRUN = the ddprun binary; 77 without torch)
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

STEPS = 9
FAIL_AT = {0: 3, 1: 6}  # attempt -> the step at whose start rank 1 fails

TRAIN = """\
import hashlib, json, os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS, FAIL_AT = %d, %r
out = os.environ['OUT']
rank, attempt = int(os.environ['RANK']), int(os.environ['TORCHELASTIC_RESTART_COUNT'])
dist.init_process_group('gloo')
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
ckpt = os.path.join(out, 'ckpt.pt')
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state['model'])
    opt.load_state_dict(state['opt'])
    start = state['step']
ddp = DDP(model)
for step in range(start, STEPS):
    if rank == 1 and FAIL_AT.get(attempt) == step:
        if attempt == 0:
            sys.exit(3)
        raise RuntimeError('rank 1 fails at step %%d' %% step)
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(8, 32, generator=g), torch.randn(8, 1, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    if rank == 0:
        torch.save({'model': model.state_dict(), 'opt': opt.state_dict(), 'step': step + 1},
                   ckpt + '.tmp')
        os.replace(ckpt + '.tmp', ckpt)
    dist.barrier()  # the checkpoint of this step is written before anyone fails at the next
digest = hashlib.sha256()
for p in model.parameters():
    digest.update(p.detach().numpy().tobytes())
with open(os.path.join(out, 'rank%%d.json' %% rank), 'w') as f:
    json.dump({'sha256': digest.hexdigest(), 'attempt': attempt, 'start': start,
               'forked': 'ddprun-zygote' in open('/proc/self/cmdline').read()}, f)
dist.destroy_process_group()
""" % (STEPS, FAIL_AT)


def have_torch():
    return subprocess.run([sys.executable, "-c", "import torch"],
                          capture_output=True).returncode == 0


def train(tmp, kind):
    out = os.path.join(tmp, kind)
    os.makedirs(out)
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write(TRAIN)
    events = os.path.join(tmp, f"{kind}.jsonl")
    args = ["--nproc-per-node=4", "--max-restarts=2", "--events", events,
            "--python", sys.executable]
    if kind == "fork":
        args += ["--preload", "torch"]
    run = h.run(args + [script], timeout=150, env=h.clean_env(OUT=out), cwd=tmp)
    assert run.rc == 0, run
    ranks = []
    for r in range(4):
        with open(os.path.join(out, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
    return run, ranks, h.read_events(events)


def test_ddp_with_two_restarts_is_bit_identical_exec_and_forked(tmp):
    results = {kind: train(tmp, kind) for kind in ("exec", "fork")}
    for kind, (run, ranks, events) in results.items():
        exits = sorted((e["attempt"], e.get("exit_code")) for e in events
                       if e["event"] == "worker_exit" and e["rank"] == 1
                       and e.get("exit_code") not in (0, None))
        assert exits == [(0, 3), (1, 1)], (kind, exits, run)
        assert [r["attempt"] for r in ranks] == [2] * 4, (kind, ranks)
        assert {r["start"] for r in ranks} == {FAIL_AT[1]}, (kind, ranks)  # resumed
        assert len({r["sha256"] for r in ranks}) == 1, (kind, ranks)  # DDP kept ranks in step
        assert all(r["forked"] == (kind == "fork") for r in ranks), (kind, ranks)
        assert not [e for e in events if e["event"] == "preload_disabled"], (kind, events)
    assert results["exec"][1][0]["sha256"] == results["fork"][1][0]["sha256"], results


if __name__ == "__main__":
    if not have_torch():
        print("SKIP: no torch in", sys.executable)
        sys.exit(77)
    h.main(globals())
