# SPDX-License-Identifier: MIT
"""No process survives `kill -9 ddprun`, nor the end of a run: checked by pid and process group,
with a grandchild that daemonises (double fork, with and without setsid)."""
import os
import signal

from harness import assert_all_gone, helper, kill_ids, main, read_ids, run, start, stop, wait_for_files


def spawned_ids(d, ranks):
    files = [os.path.join(d, f"{r}.{k}") for r in ranks for k in ("worker", "grandchild")]
    wait_for_files(files)
    ids = [read_ids(f) for f in files]
    return [p for p, _ in ids], sorted({g for _, g in ids})


def kill9_case(tmp, mode):
    d = os.path.join(tmp, mode or "plain")
    os.mkdir(d)
    args = ["--nproc_per_node", "3", helper("grandchild_spawner"), d, "wait"] + ([mode] if mode else [])
    p = start(args)
    pids, pgids = [], []
    try:
        pids, pgids = spawned_ids(d, range(3))
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        assert_all_gone(pids, pgids, timeout=5)
    finally:
        stop(p)
        kill_ids(pids, pgids)


def test_kill_9_leaves_nothing(tmp):
    kill9_case(tmp, None)


def test_kill_9_leaves_nothing_even_setsid_daemons(tmp):
    kill9_case(tmp, "setsid")


def test_end_of_run_leaves_nothing(tmp):
    for mode in (None, "setsid"):
        d = os.path.join(tmp, f"end_{mode}")
        os.mkdir(d)
        r = run(["--nproc_per_node", "2", helper("grandchild_spawner"), d, "exit"] +
                ([mode] if mode else []), timeout=30)
        pids, pgids = spawned_ids(d, range(2))
        try:
            assert r.rc == 0, r
            # ddprun has already exited: nothing may be running now.
            assert_all_gone(pids, pgids, timeout=0.5)
        finally:
            kill_ids(pids, pgids)


if __name__ == "__main__":
    main(globals())
