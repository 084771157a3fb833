"""Multi-node rendezvous with every agent a separate process (rdzv_agent_probe) on one ddprun-store.

  python3 agents_test.py STORE_BIN PROBE_BIN
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch"))
from store_harness import running_store  # noqa: E402


def start(probe, port, **kw):
    argv = [probe, "--port", str(port)]
    for k, v in kw.items():
        argv += ["--" + k.replace("_", "-"), str(v)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def first_line(proc, timeout=20):
    deadline = time.time() + timeout
    line = proc.stdout.readline()
    if not line or time.time() > deadline:
        raise AssertionError(f"probe printed nothing; stderr: {proc.stderr.read()}")
    return json.loads(line)


def main():
    store_bin, probe = sys.argv[1], sys.argv[2]
    procs = []
    try:
        with running_store(store_bin) as (port, _):
            # 3 static nodes, local sizes 2, 1, 3, started in reverse order.
            common = dict(run_id="job3", min=3, max=3, hb_ms=50, hb_timeout_ms=1500, hold_ms=10000)
            for rank, lws in ((2, 3), (1, 1), (0, 2)):
                procs.append(start(probe, port, node_rank=rank, lws=lws, name=f"node{rank}", **common))
            results = {}
            for p in procs:
                r = first_line(p)
                results[r["node_rank"]] = r
            assert [results[i]["base_rank"] for i in range(3)] == [0, 2, 3], results
            assert all(r["world_size"] == 6 and r["num_nodes"] == 3 for r in results.values()), results
            # Kill node 1's agent outright: the others must report it lost.
            victim = procs[1]
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            for p in (procs[0], procs[2]):
                line = p.stdout.readline().strip()
                assert line == "LOST 1 node1", f"expected LOST 1 node1, got {line!r}"
            print("3 agents as processes: ranks agree, SIGKILLed node reported lost")

            # Stop broadcast across processes.
            common = dict(run_id="jobstop", min=2, max=2, hb_ms=50, hb_timeout_ms=5000, hold_ms=3000)
            a = start(probe, port, node_rank=0, name="a", **common)
            b = start(probe, port, node_rank=1, name="b", stop_after_ms=200, **common)
            procs += [a, b]
            first_line(a)
            first_line(b)
            for p in (a, b):
                line = p.stdout.readline().strip()
                assert line == "STOP node 1 (b): rank 1 exited with code 3", line
            print("stop broadcast reached both agents")

        # A stranger with the wrong token is refused (exit 2) and the job still forms, on a store
        # started with the token.
        with running_store(store_bin, env=dict(os.environ, DDPRUN_RDZV_TOKEN="s3cret")) as (port, _):
            common = dict(run_id="jobtok", min=2, max=2, hold_ms=500)
            good0 = start(probe, port, node_rank=0, name="good0", token="s3cret", **common)
            time.sleep(0.3)
            bad = start(probe, port, node_rank=1, name="stranger", token="guess", **common)
            procs += [good0, bad]
            assert bad.wait(timeout=20) == 2
            assert "wrong or missing rendezvous token" in bad.stderr.read()
            good1 = start(probe, port, node_rank=1, name="good1", token="s3cret", **common)
            procs.append(good1)
            assert first_line(good0)["world_size"] == 2 and first_line(good1)["node_rank"] == 1
            print("wrong token refused, right token admitted")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


if __name__ == "__main__":
    main()
