# SPDX-License-Identifier: MIT
"""The seed-style DDP job on 3 loopback nodes gives the same results with --store-proxy on as
without, and with it every worker's MASTER_ADDR:MASTER_PORT is its own node's proxy.
Usage: test_store_proxy_torch.py PYTHON"""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import start, stop  # noqa: E402
from test_multinode_torch import check, free_port  # noqa: E402
from test_torch import parse  # noqa: E402

SCRIPT = os.path.join(HERE, "proxy_ddp_check.py")


def run_job(python, extra):
    port = free_port()
    py = [] if python == "default" else ["--python", python]
    nodes = [start(["--nnodes", "3", "--node_rank", str(k), "--nproc_per_node", str(n), "--master_addr",
                    "127.0.0.1", "--master_port", str(port), *extra, *py, SCRIPT])
             for k, n in enumerate([2, 1, 1])]
    results, addrs = {}, {}
    try:
        for k, p in enumerate(nodes):
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, f"node {k}: rc={p.returncode}\n{out[-3000:]}\n{err[-3000:]}"
            parse(out, results)
            for node, addr in re.findall(r"STORE_ADDR (\d+) (\S+)", out):
                addrs.setdefault(int(node), set()).add(addr)
    finally:
        for p in nodes:
            stop(p)
    return results, addrs, port


def main():
    python = sys.argv[1]
    interpreter = "python3" if python == "default" else python
    if not shutil.which(interpreter) or subprocess.run(
            [interpreter, "-c", "import torch.distributed"], capture_output=True).returncode != 0:
        print(f"SKIP: {interpreter} cannot import torch.distributed")
        sys.exit(77)
    direct, direct_addrs, direct_port = run_job(python, [])
    proxied, proxied_addrs, root_port = run_job(python, ["--store-proxy", "on"])
    check(direct, 4)
    check(proxied, 4)
    # Same job, same answers: the all_reduce, the sampler's shards, the trained weights.
    for r in range(4):
        for field in ("allreduce", "indices", "all_indices", "weights", "local_rank"):
            assert direct[r][field] == proxied[r][field], (r, field, direct[r][field], proxied[r][field])
    assert all(a == {f"127.0.0.1:{direct_port}"} for a in direct_addrs.values()), direct_addrs
    # With the proxy: one address per node, on loopback, not the root store's, different per node.
    assert sorted(proxied_addrs) == [0, 1, 2], proxied_addrs
    per_node = [next(iter(a)) for _, a in sorted(proxied_addrs.items())]
    assert all(len(a) == 1 for a in proxied_addrs.values()), proxied_addrs
    assert all(a.startswith("127.0.0.1:") and a != f"127.0.0.1:{root_port}" for a in per_node), per_node
    assert len(set(per_node)) == 3, per_node
    print(f"torch {direct[0]['torch']}: same results with --store-proxy on; workers used {per_node}")


if __name__ == "__main__":
    main()
