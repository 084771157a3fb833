# SPDX-License-Identifier: MIT
"""A real PyTorch DDP script runs unchanged under ddprun and its ranks agree.
Usage: test_torch.py PYTHON (e.g. /usr/bin/python3 for Debian's torch 1.13, python3 for 2.x)."""
import json
import os
import shutil
import sys

from harness import clean_env, run

HERE = os.path.dirname(os.path.abspath(__file__))


def check(python):
    args = ["--nproc_per_node", "2"]
    if python != "default":
        args += ["--python", python]
    r = run(args + [os.path.join(HERE, "..", "ddp_check.py")], timeout=240)
    assert r.rc == 0, r
    results = {}
    for line in r.out.splitlines():
        prefix, _, rest = line.partition(":")
        if rest.startswith("DDP_CHECK "):
            obj = json.loads(rest[len("DDP_CHECK "):])
            assert prefix == f"[rank{obj['rank']}]", line
            results[obj["rank"]] = obj
    assert sorted(results) == [0, 1], r
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
    if python != "default" and not shutil.which(python):
        print(f"SKIP: {python} not found")
        sys.exit(0)
    check(python)
