# SPDX-License-Identifier: MIT
"""Every torchrun variable is right for every rank, for a few shapes, with real processes."""
import os
import socket

from harness import clean_env, helper, main, read_events, run, start, stop


def dumps(outdir, attempt=0):
    envs = {}
    for name in os.listdir(outdir):
        if name.endswith(f".{attempt}.env"):
            env, args = {}, []
            for line in open(os.path.join(outdir, name)):
                key, _, value = line.rstrip("\n").partition("=")
                if key == "ARG":
                    args.append(value)
                else:
                    env[key] = value
            envs[int(name.split(".")[0])] = (env, args)
    return envs


def check_shape(tmp, nnodes, node_rank, nproc, extra=(), env=None):
    out = os.path.join(tmp, f"shape_{nnodes}_{node_rank}_{nproc}")
    os.mkdir(out)
    args = ["--nnodes", nnodes, "--node_rank", node_rank, "--nproc_per_node", nproc,
            "--master_addr", "127.0.0.1", "--log_dir", os.path.join(tmp, "logs"), *extra, helper("env_dumper"), out, "--lr", "3", "--x=y"]
    r = run(args, env=env)
    assert r.rc == 0, r
    envs = dumps(out)
    expected_ranks = {node_rank * nproc + lr for lr in range(nproc)}
    assert set(envs) == expected_ranks, (envs.keys(), r)
    ports = set()
    for rank, (e, argv) in envs.items():
        lr = rank - node_rank * nproc
        assert argv == ["--lr", "3", "--x=y"], argv
        assert e["RANK"] == str(rank)
        assert e["LOCAL_RANK"] == str(lr)
        assert e["WORLD_SIZE"] == str(nnodes * nproc)
        assert e["LOCAL_WORLD_SIZE"] == str(nproc)
        assert e["GROUP_RANK"] == str(node_rank)
        assert e["GROUP_WORLD_SIZE"] == str(nnodes)
        assert e["ROLE_RANK"] == str(rank)
        assert e["ROLE_WORLD_SIZE"] == str(nnodes * nproc)
        assert e["ROLE_NAME"] == "default"
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert 0 < int(e["MASTER_PORT"]) < 65536
        ports.add(e["MASTER_PORT"])
        assert e["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert e["TORCHELASTIC_MAX_RESTARTS"] == "0"
        assert e["TORCHELASTIC_RUN_ID"] == "none"
        assert e["TORCHELASTIC_USE_AGENT_STORE"] == "True"  # ddprun's agent hosts the store
        assert e["TORCHELASTIC_ERROR_FILE"].startswith(os.path.join(tmp, "logs", "none_"))
        assert e["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{lr}/error.json")
        assert os.path.isdir(os.path.dirname(e["TORCHELASTIC_ERROR_FILE"]))
        assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert e["NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert e.get("OMP_NUM_THREADS") == ("1" if nproc > 1 else None)
        assert e["PATH"] == os.environ["PATH"]  # inherited
    assert len(ports) == 1  # every rank meets at the same port
    notice = "setting OMP_NUM_THREADS=1" in r.err
    assert notice == (nproc > 1), r
    return envs


def test_single_node_shapes(tmp):
    check_shape(tmp, 1, 0, 1)
    check_shape(tmp, 1, 0, 4)


def test_multi_node_static_shape(tmp):
    with socket.socket() as s:  # a port for node 0's store (node 0 binds and holds it)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The three nodes of one static job meet through node 0's store; node 2's workers are checked.
    others = []
    for k in (0, 1):
        out = os.path.join(tmp, f"node{k}")
        os.mkdir(out)
        others.append(start(["--nnodes", 3, "--node_rank", k, "--nproc_per_node", 2, "--master_addr",
                             "127.0.0.1", "--master_port", port, helper("env_dumper"), out]))
    try:
        envs = check_shape(tmp, 3, 2, 2, extra=["--master_port", port])
        for p in others:
            p.communicate(timeout=60)
            assert p.returncode == 0
    finally:
        for p in others:
            stop(p)
    assert all(e["MASTER_PORT"] == str(port) for e, _ in envs.values())


def test_pet_fallback_and_user_overrides(tmp):
    out = os.path.join(tmp, "pet")
    os.mkdir(out)
    env = clean_env(PET_NPROC_PER_NODE=3, PET_MAX_RESTARTS=2, PET_RDZV_ID="job42",
                    OMP_NUM_THREADS=5, NCCL_ASYNC_ERROR_HANDLING=0)
    r = run([helper("env_dumper"), out], env=env)
    assert r.rc == 0, r
    envs = dumps(out)
    assert sorted(envs) == [0, 1, 2]
    for e, _ in envs.values():
        assert e["TORCHELASTIC_MAX_RESTARTS"] == "2"
        assert e["TORCHELASTIC_RUN_ID"] == "job42"
        assert e["OMP_NUM_THREADS"] == "5"
        assert e["NCCL_ASYNC_ERROR_HANDLING"] == "0"
    assert "OMP_NUM_THREADS" not in r.err
    # The command line wins over PET_.
    out2 = os.path.join(tmp, "pet2")
    os.mkdir(out2)
    r = run(["--nproc-per-node", "1", helper("env_dumper"), out2], env=env)
    assert r.rc == 0 and sorted(dumps(out2)) == [0], r


def test_bind_gpu_by_local_rank(tmp):
    out = os.path.join(tmp, "gpu")
    os.mkdir(out)
    devices = "GPU-11111111-2222-3333-4444-555555555555,MIG-abcd,7"
    r = run(["--nproc_per_node", "gpu", "--bind-gpu", helper("env_dumper"), out],
            env=clean_env(CUDA_VISIBLE_DEVICES=devices))
    assert r.rc == 0, r
    envs = dumps(out)
    assert [envs[i][0]["CUDA_VISIBLE_DEVICES"] for i in range(3)] == devices.split(",")
    # Without --bind-gpu the parent's list is inherited unchanged; more ranks than GPUs warns.
    out2 = os.path.join(tmp, "gpu2")
    os.mkdir(out2)
    r = run(["--nproc_per_node", "4", helper("env_dumper"), out2],
            env=clean_env(CUDA_VISIBLE_DEVICES=devices))
    assert r.rc == 0, r
    assert "4 processes per node but only 3 visible GPU(s)" in r.err, r
    assert all(e["CUDA_VISIBLE_DEVICES"] == devices for e, _ in dumps(out2).values())


def test_dry_run_and_events(tmp):
    r = run(["--dry-run", "--nproc_per_node", "2", "--master_port", "29999", "train.py", "--lr", "3"])
    assert r.rc == 0, r
    assert "rank 1 (local_rank 1):" in r.out and "-u train.py --lr 3" in r.out, r
    assert "    RANK=1" in r.out and "    MASTER_PORT=29999" in r.out, r
    r = run(["--dry-run", "--events", "-", "--nproc_per_node", "2", "-m", "pkg.mod"])
    import json
    objs = [json.loads(l) for l in r.out.splitlines()]
    assert [o["rank"] for o in objs] == [0, 1], r
    assert objs[1]["argv"][1:] == ["-u", "-m", "pkg.mod"] and objs[1]["env"]["LOCAL_RANK"] == "1"
    events = os.path.join(tmp, "events.jsonl")
    out = os.path.join(tmp, "ev")
    os.mkdir(out)
    r = run(["--events", events, "--nproc_per_node", "2", helper("env_dumper"), out])
    assert r.rc == 0, r
    kinds = [e["event"] for e in read_events(events)]
    assert kinds[0] == "launch" and kinds[-1] == "summary", kinds
    assert kinds.count("worker_start") == 2 and kinds.count("worker_exit") == 2, kinds
    assert read_events(events)[-1]["exit_code"] == 0


if __name__ == "__main__":
    main(globals())
