# SPDX-License-Identifier: MIT
"""Real gloo worlds across ddprun's restarts and re-forms. torch 2.x workers key their init by
process group only (1.13 put it under /worker/attempt_<n>), so unless ddprun clears the last
attempt's keys from its store, attempt 1 reads attempt 0's gloo addresses and fails with
`connectFullMesh ... Connection refused` (torchrun 2.15 fails the same way).
Usage: test_torch_restart.py PYTHON single|static2|rescale"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import start, stop, wait_until  # noqa: E402
import test_elastic as el  # noqa: E402
import test_multinode as mn  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "gloo_restart.py")


def gloo_lines(text):
    found = []
    for line in text.splitlines():
        if "GLOO " in line:
            found.append(dict(kv.split("=", 1) for kv in line.split("GLOO ", 1)[1].split()))
    return found


def check_attempt(lines, attempt, world):
    got = sorted(int(l["rank"]) for l in lines if l["attempt"] == str(attempt))
    assert got == list(range(world)), (attempt, got, lines)
    expected = world * (world + 1) // 2
    assert all(l["sum"] == str(expected) and l["world"] == str(world)
               for l in lines if l["attempt"] == str(attempt)), lines


def run_all(procs, timeout=240):
    outs = []
    try:
        for k, p in enumerate(procs):
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, f"node {k}: rc={p.returncode}\n{out[-3000:]}\n{err[-3000:]}"
            outs.append(out)
    finally:
        for p in procs:
            stop(p)
    return outs


def single(py):
    out, = run_all([start(["--standalone", "--nproc_per_node", "3", "--max_restarts", "1", *py,
                           SCRIPT, "fail_once"])])
    lines = gloo_lines(out)
    check_attempt(lines, 0, 3)
    check_attempt(lines, 1, 3)


def static2(py):
    port = mn.free_port()
    procs = [start(["--nnodes", "2", "--node_rank", str(k), "--nproc_per_node", str(n), "--master_addr",
                    "127.0.0.1", "--master_port", str(port), "--max_restarts", "1", *py, SCRIPT,
                    "fail_once"]) for k, n in enumerate((2, 1))]
    lines = [l for out in run_all(procs) for l in gloo_lines(out)]
    check_attempt(lines, 0, 3)
    check_attempt(lines, 1, 3)


def rescale(py):
    store = el.Store()
    tmp = tempfile.mkdtemp(prefix="ddprun-torch-rescale-")
    nodes = []
    try:
        for k in range(3):
            args = ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{store.port}", "--rdzv_id", "tr",
                    "--nnodes", "2:3", "--nproc_per_node", 1, "--rdzv_conf", el.FAST, *py, SCRIPT, "wait_once"]
            nodes.append(mn.Node(tmp, f"agent{k}", args))
        wait_until(lambda: sum(len(gloo_lines(n.text()[0])) for n in nodes) == 3, 120, "attempt 0 on 3 nodes")
        victim = sorted(nodes, key=lambda n: el.group_rank(n, 0))[1]
        el.kill_agent(victim)
        survivors = [n for n in nodes if n is not victim]
        assert mn.finish(survivors, timeout=180) == [0, 0], survivors
        lines = [l for n in nodes for l in gloo_lines(n.text()[0])]
        check_attempt(lines, 0, 3)
        check_attempt(lines, 1, 2)
    finally:
        mn.finish(nodes, timeout=30)
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    python, mode = sys.argv[1], sys.argv[2]
    interpreter = "python3" if python == "default" else python
    if not shutil.which(interpreter) or subprocess.run(
            [interpreter, "-c", "import torch.distributed"], capture_output=True).returncode != 0:
        print(f"SKIP: {interpreter} cannot import torch.distributed")
        sys.exit(77)
    {"single": single, "static2": static2, "rescale": rescale}[mode]([] if python == "default" else ["--python", python])
    print(f"{mode}: ok")
