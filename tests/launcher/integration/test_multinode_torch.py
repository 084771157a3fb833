# SPDX-License-Identifier: MIT
"""Real PyTorch across ddprun 'nodes' on this host: every worker, rank 0 included, reaches
ddprun's agent store as a client, gloo forms one world, and all ranks agree on an all_reduce.
Usage: test_multinode_torch.py PYTHON static3|c10d2"""
import os
import shutil
import socket
import subprocess
import sys

from harness import start, stop

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "ddp_check.py")
sys.path.insert(0, HERE)
from test_torch import parse  # noqa: E402  (one DDP_CHECK parser for all torch tests)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_nodes(per_node_args, python):
    py = [] if python == "default" else ["--python", python]
    nodes = [start(args + py + [SCRIPT]) for args in per_node_args]
    results = {}
    try:
        for k, p in enumerate(nodes):
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, f"node {k}: rc={p.returncode}\n{out[-3000:]}\n{err[-3000:]}"
            parse(out, results)
    finally:
        for p in nodes:
            stop(p)
    return results


def check(results, world):
    assert sorted(results) == list(range(world)), sorted(results)
    expected = world * (world + 1) / 2  # all_reduce of rank + 1
    for r, obj in results.items():
        assert obj["world"] == world and obj["allreduce"] == expected, obj
    assert all(obj["weights"] == results[0]["weights"] for obj in results.values())
    # DistributedSampler pads to a multiple of the world size, so only coverage is exact.
    indices = [i for obj in results.values() for i in obj["indices"]]
    assert set(indices) == set(range(20)) and len(indices) == -(-20 // world) * world, indices
    print(f"torch {results[0]['torch']}: {world} ranks agree on {expected}")


def static3(python):
    port = free_port()
    nprocs = [2, 1, 1]
    args = [["--nnodes", "3", "--node_rank", str(k), "--nproc_per_node", str(n), "--master_addr",
             "127.0.0.1", "--master_port", str(port)] for k, n in enumerate(nprocs)]
    results = run_nodes(args, python)
    check(results, 4)
    assert [results[r]["local_rank"] for r in range(4)] == [0, 1, 0, 0], results


def c10d2(python):
    port = free_port()
    args = [["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "t",
             "--nnodes", "2", "--nproc_per_node", str(n)] for n in (1, 2)]
    check(run_nodes(args, python), 3)


if __name__ == "__main__":
    python, mode = sys.argv[1], sys.argv[2]
    interpreter = "python3" if python == "default" else python
    if not shutil.which(interpreter) or subprocess.run(
            [interpreter, "-c", "import torch.distributed"], capture_output=True).returncode != 0:
        print(f"SKIP: {interpreter} cannot import torch.distributed")
        sys.exit(77)
    {"static3": static3, "c10d2": c10d2}[mode](python)
