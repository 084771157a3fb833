# SPDX-License-Identifier: MIT
"""A plain torchrun-style DDP training script that survives re-forms by checkpointing (nothing
ddprun-specific; torch 1.13 and 2.x, gloo, CPU). Small MLP, synthetic regression data, fixed
seeds, one intra-op thread: the same checkpoint and the same WORLD_SIZE give bit-identical results.

Usage: elastic_train.py CKPT_DIR EPOCHS
* At start every rank loads the newest CKPT_DIR/epoch_<NNN>.pt (NNN = epochs done; model and
  optimizer state), or starts from the seed when there is none.
* Each epoch: a DistributedSampler (seed 7, set_epoch) over 240 samples, batches of 8 per rank,
  a short sleep per step (so a test can act mid-epoch). After each epoch rank 0 writes
  epoch_<NNN>.pt atomically (temporary file, fsync, rename, fsync of the directory); earlier
  checkpoints are kept.
* After the last epoch rank 0 writes CKPT_DIR/final.sha256: the sha256 of the model's and the
  optimizer's tensors.
Lines on stdout (rank 0 unless noted; every rank prints START):
  TRAIN START rank=R world=W restart=N resume=K master=H:P   (K: epochs done by the loaded checkpoint)
  TRAIN STEP epoch=E step=S
  TRAIN SAVED epoch=K
  TRAIN DONE hash=HEX world=W restart=N"""
import datetime
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

STEP_SLEEP = 0.03


def data():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(240, 8, generator=g)
    w = torch.randn(8, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(240, 1, generator=g)
    return TensorDataset(x, y)


def newest(ckpt_dir):
    done = [int(n[len("epoch_"):-len(".pt")]) for n in os.listdir(ckpt_dir)
            if n.startswith("epoch_") and n.endswith(".pt")]
    return max(done, default=0)


def atomic_save(obj, path):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def state_hash(model, opt):
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    for k, st in sorted(opt.state_dict()["state"].items()):
        for name, t in sorted(st.items()):
            if torch.is_tensor(t):
                h.update(f"{k}.{name}".encode())
                h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main():
    ckpt_dir, epochs = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    done = newest(ckpt_dir)
    if done:
        ckpt = torch.load(os.path.join(ckpt_dir, f"epoch_{done:03d}.pt"))
        assert ckpt["epochs_done"] == done, ckpt["epochs_done"]
        net.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
    print(f"TRAIN START rank={rank} world={world} restart={restart} resume={done} "
          f"master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
    model = DistributedDataParallel(net)

    dataset = data()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=7,
                                 drop_last=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    for epoch in range(done, epochs):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            if rank == 0:
                print(f"TRAIN STEP epoch={epoch} step={step}", flush=True)
            time.sleep(STEP_SLEEP)
        if rank == 0:
            atomic_save({"epochs_done": epoch + 1, "model": net.state_dict(),
                         "optimizer": opt.state_dict()},
                        os.path.join(ckpt_dir, f"epoch_{epoch + 1:03d}.pt"))
            print(f"TRAIN SAVED epoch={epoch + 1}", flush=True)
        dist.barrier()

    if rank == 0:
        digest = state_hash(net, opt)
        with open(os.path.join(ckpt_dir, "final.sha256"), "w") as f:
            f.write(digest + "\n")
        print(f"TRAIN DONE hash={digest} world={world} restart={restart}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
