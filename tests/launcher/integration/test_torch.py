# SPDX-License-Identifier: MIT
"""A real PyTorch DDP script runs unchanged under ddprun and its ranks agree.
Usage: test_torch.py PYTHON [two-nodes]
  PYTHON: /usr/bin/python3 (Debian's torch 1.13) or "default" (python3 on PATH, torch 2.x).
  two-nodes: two ddprun processes as two static nodes (--nnodes 2) on this host."""
import json
import os
import shutil
import socket
import subprocess
import sys

from harness import clean_env, run, start, stop

HERE = os.path.dirname(os.path.abspath(__file__))


SCRIPT = os.path.join(HERE, "..", "ddp_check.py")


def parse(out, results):
    for line in out.splitlines():
        prefix, _, rest = line.partition(":")
        if rest.startswith("DDP_CHECK "):
            obj = json.loads(rest[len("DDP_CHECK "):])
            assert prefix == f"[rank{obj['rank']}]", line
            results[obj["rank"]] = obj


def check(python):
    args = ["--nproc_per_node", "2"]
    if python != "default":
        args += ["--python", python]
    r = run(args + [SCRIPT], timeout=240)
    assert r.rc == 0, r
    results = {}
    parse(r.out, results)
    assert sorted(results) == [0, 1], r
    agree(results)


def check_two_static_nodes(python):
    """Two ddprun 'nodes' on this host (--nnodes 2, static, with a token): node 0's ddprun hosts the store."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = ["--nnodes", "2", "--nproc_per_node", "1", "--master_addr", "127.0.0.1",
              "--master_port", str(port)] + ([] if python == "default" else ["--python", python])
    # With a token: the store keeps its rendezvous keys to the agents, while the unmodified
    # PyTorch workers (who never see the token) keep full use of their own keys.
    env = clean_env(DDPRUN_RDZV_TOKEN="torch-two-nodes-token")
    nodes = [start(common + ["--node_rank", str(n), SCRIPT], env=env) for n in (0, 1)]
    results = {}
    try:
        for n, p in enumerate(nodes):
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, f"node {n}: rc={p.returncode}\n{out}\n{err}"
            parse(out, results)
    finally:
        for p in nodes:
            stop(p)
    assert sorted(results) == [0, 1], results
    assert results[0]["local_rank"] == results[1]["local_rank"] == 0
    agree(results)


def agree(results):
    a, b = results[0], results[1]
    assert a["world"] == b["world"] == 2
    assert a["allreduce"] == b["allreduce"] == 3.0
    assert a["all_indices"] == b["all_indices"]
    assert a["all_indices"][0] == a["indices"] and a["all_indices"][1] == b["indices"]
    assert sorted(a["indices"] + b["indices"]) == list(range(20))  # disjoint and complete
    assert a["weights"] == b["weights"]  # DDP kept the replicas identical
    print(f"torch {a['torch']}: ranks agree")


if __name__ == "__main__":
    python = sys.argv[1] if len(sys.argv) > 1 else "default"
    interpreter = "python3" if python == "default" else python
    if not shutil.which(interpreter) or subprocess.run(
            [interpreter, "-c", "import torch.distributed"], capture_output=True).returncode != 0:
        print(f"SKIP: {interpreter} cannot import torch.distributed")
        sys.exit(77)  # ctest SKIP_RETURN_CODE
    if len(sys.argv) > 2 and sys.argv[2] == "two-nodes":
        check_two_static_nodes(python)
    else:
        check(python)
