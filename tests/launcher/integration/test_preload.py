# SPDX-License-Identifier: MIT
"""--preload (docs/warm-start.md): workers forked from a per-node preloaded interpreter must be
indistinguishable from exec'd ones, exit and die the same way, restart after the zygote is
SIGKILLed, and refuse unsafe preloads with one line; nothing is left behind in any case.

Run: python3 test_preload.py [test_name...]   (DDPRUN = the ddprun binary)
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "preload_probe.py")
ZYGOTE_MARK = "<ddprun-zygote>"


def have_torch():
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


def probe_run(tmp, name, preload, nproc=2, extra=(), timeout=120, **env):
    """Runs the probe under ddprun; returns (Run, probe dir, events)."""
    out = os.path.join(tmp, name)
    os.makedirs(out)
    events = os.path.join(tmp, name + ".jsonl")
    args = [f"--nproc-per-node={nproc}", "--events", events, "--python", sys.executable]
    if preload:
        args += ["--preload", preload]
    e = h.clean_env(PROBE_DIR=out, PROBE_TORCH=env.pop("PROBE_TORCH", "0"), **env)
    e.pop("PYTHONUNBUFFERED", None)
    run = h.run(args + list(extra) + [PROBE], timeout=timeout, env=e, cwd=tmp)
    return run, out, h.read_events(events)


def seen(out, rank, attempt=0):
    with open(os.path.join(out, f"{rank}.{attempt}.json")) as f:
        return json.load(f)


def processes_with(token):
    """Live processes whose environment or command line carries this run's token."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if token.encode() in f.read():
                    if h.proc_stat(int(entry)):
                        found.append(int(entry))
        except OSError:
            pass
    return found


def assert_nothing_left(token):
    h.wait_until(lambda: not processes_with(token), 10, f"processes of run {token} to be gone")


def forked(observed):
    return any(ZYGOTE_MARK in part for part in observed["cmdline"])


# Fields that must differ between two runs (or two processes) whatever the start.
# "tasks": an exec'd worker still runs the OpenBLAS pool that `import torch` started; a forked one
# starts it again at its first BLAS call (the pool stops itself before a fork; "matmul" checks it).
# torch's first seed: fixed in 1.x, drawn from the OS in 2.x; checked below against the exec'd.
PER_PROCESS = {"pid", "ppid", "random_draw", "random_bits", "token", "cmdline", "tasks",
               "torch_seed", "torch_draw"}
# Environment variables whose values are per run (a fresh port, run directory, token).
PER_RUN_VARS = {"DDPRUN_JOB_TOKEN", "MASTER_PORT", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_RUN_ID",
                "PROBE_DIR", "DDPRUN_HEARTBEAT_SOCKET"}


def normalized(observed, out):
    o = {k: v for k, v in observed.items() if k not in PER_PROCESS}
    o["cgroup"] = re.sub(r"ddprun-[0-9]+-[0-9a-f]+", "<job cgroup>", o["cgroup"])
    for key in ("environ", "c_environ"):
        o[key] = {k: ("<per run>" if k in PER_RUN_VARS else v.replace(out, "<dir>"))
                  for k, v in o[key].items()}
    return o


def test_forked_worker_is_indistinguishable(tmp):
    if not have_torch():
        raise h.Skip("python3 has no torch")
    runs = {}
    for name, preload in (("exec", None), ("fork", "torch"), ("fork2", "torch")):
        run, out, events = probe_run(tmp, name, preload, nproc=4, PROBE_TORCH="1", timeout=180)
        assert run.rc == 0, run
        pid = next(e["pid"] for e in events if e["event"] == "launch")
        runs[name] = (run, out, events, pid)
    random_draws = set()
    for rank in range(4):
        exec_seen = seen(runs["exec"][1], rank)
        assert not forked(exec_seen), exec_seen["cmdline"]
        for name in ("fork", "fork2"):
            run, out, events, ddprun_pid = runs[name]
            fork_seen = seen(out, rank)
            assert forked(fork_seen), f"rank {rank} was not forked: {fork_seen['cmdline']}"
            assert fork_seen["ppid"] == ddprun_pid, (fork_seen["ppid"], ddprun_pid)
            assert exec_seen["ppid"] == runs["exec"][3]
            a, b = normalized(exec_seen, runs["exec"][1]), normalized(fork_seen, out)
            diff = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
            assert not diff, f"rank {rank}: exec'd and forked workers differ:\n" + "\n".join(
                f"  {k}: exec {v[0]!r}\n  {' ' * len(k)}  fork {v[1]!r}" for k, v in diff.items())
            assert fork_seen["environ"] == fork_seen["c_environ"]
            random_draws.add(fork_seen["random_bits"])
        assert exec_seen["pdeathsig"] == signal.SIGKILL and exec_seen["own_session"]
    assert len(random_draws) == 8, f"random draws repeat across ranks or runs: {random_draws}"
    exec_seeds = {seen(runs["exec"][1], rank)["torch_seed"] for rank in range(4)}
    fork_seeds = [seen(runs[name][1], rank)["torch_seed"] for name in ("fork", "fork2")
                  for rank in range(4)]
    if len(exec_seeds) == 1:  # a fixed first seed (torch 1.x): the same in forked workers
        assert set(fork_seeds) == exec_seeds, (exec_seeds, fork_seeds)
    else:  # drawn at start: distinct per rank and run
        assert len(set(fork_seeds)) == 8, fork_seeds
    for name in ("fork", "fork2"):
        events = runs[name][2]
        assert [e for e in events if e["event"] == "preload"], events
        assert not [e for e in events if e["event"] == "preload_disabled"], events
        assert_nothing_left(seen(runs[name][1], 0)["token"])


EXIT_CASES = ["exit3", "exit_message", "raise", "os_exit5", "sigkill", "sigterm", "keyboard"]


def worker_exits(events):
    return [(e["attempt"], e["rank"], e.get("exit_code"), e.get("signal"))
            for e in events if e["event"] == "worker_exit" and e["rank"] == 1]


def rank1_stderr(run):
    lines = [l for l in run.err.splitlines() if l.startswith("[rank1]:")]
    return [l for l in lines if "probe rank" not in l]


def test_exit_paths_match_exec(tmp):
    for how in EXIT_CASES:
        results = {}
        for name, preload in (("exec", None), ("fork", "json")):
            run, out, events = probe_run(tmp, f"{how}-{name}", preload,
                                         extra=["--max-restarts", "1"], PROBE_EXIT=how)
            results[name] = (run, worker_exits(events), rank1_stderr(run))
            assert os.path.exists(os.path.join(out, "1.1.json")), f"{how}: no restart\n{run}"
            if preload:
                assert forked(seen(out, 1, 1)), f"{how}: the restart was not forked"
                assert_nothing_left(seen(out, 1)["token"])
        (erun, eexits, eerr), (frun, fexits, ferr) = results["exec"], results["fork"]
        assert erun.rc == frun.rc, f"{how}: rc {erun.rc} exec'd, {frun.rc} forked\n{frun}"
        assert eexits == fexits, f"{how}: {eexits} exec'd, {fexits} forked"
        assert eerr == ferr, f"{how}: stderr differs\nexec'd: {eerr}\nforked: {ferr}"
        assert len(eexits) == 2, eexits


def test_preload_that_starts_a_thread_falls_back(tmp):
    with open(os.path.join(tmp, "threadmod.py"), "w") as f:
        f.write("import threading, time\n"
                "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n")
    script = os.path.join(tmp, "ok.py")
    with open(script, "w") as f:
        f.write("import os, sys; print('worker', os.environ['RANK'], open('/proc/self/cmdline')"
                ".read().count('ddprun-zygote'))\n")
    check_fallback(tmp, "threadmod", script, "left 2 threads running")


def test_preload_that_fails_to_import_falls_back(tmp):
    script = os.path.join(tmp, "ok.py")
    with open(script, "w") as f:
        f.write("import os; print('worker', os.environ['RANK'], open('/proc/self/cmdline')"
                ".read().count('ddprun-zygote'))\n")
    check_fallback(tmp, "json,no_such_module_xyz", script,
                   "preload import failed: ModuleNotFoundError: No module named 'no_such_module_xyz'")


def test_preload_that_initialises_cuda_falls_back(tmp):
    # No GPU here: the module reports CUDA initialised the way torch would after torch.cuda.init().
    if not have_torch():
        raise h.Skip("python3 has no torch")
    with open(os.path.join(tmp, "cudamod.py"), "w") as f:
        f.write("import torch\ntorch.cuda.is_initialized = lambda: True\n")
    script = os.path.join(tmp, "ok.py")
    with open(script, "w") as f:
        f.write("import os; print('worker', os.environ['RANK'], open('/proc/self/cmdline')"
                ".read().count('ddprun-zygote'))\n")
    check_fallback(tmp, "cudamod", script, "initialised CUDA")


def check_fallback(tmp, preload, script, reason):
    events = os.path.join(tmp, "ev.jsonl")
    run = h.run(["--nproc-per-node=2", "--events", events, "--python", sys.executable,
                 "--preload", preload, script], timeout=120, cwd=tmp)
    assert run.rc == 0, run
    said = [l for l in h.ddprun_lines(run.err) if "--preload" in l]
    assert len(said) == 1 and reason in said[0] and "without it" in said[0], run
    disabled = [e for e in h.read_events(events) if e["event"] == "preload_disabled"]
    assert len(disabled) == 1 and reason in disabled[0]["reason"], disabled
    for rank in (0, 1):  # exec'd: no zygote in their command line
        assert f"worker {rank} 0" in run.out, run


def test_non_python_program_is_refused(tmp):
    run = h.run(["--nproc-per-node=1", "--preload", "torch", "/bin/true"], timeout=30)
    assert run.rc == 2, run
    assert h.ddprun_lines(run.err) == [
        "ddprun: --preload: '/bin/true' is not a Python program (.py or -m); only those can be "
        "preloaded"], run
    run = h.run(["--nproc-per-node=1", "--preload", "torch,,numpy", "x.py"], timeout=30)
    assert run.rc == 2 and "--preload: '' is not a module name" in run.err, run


def test_zygote_killed_mid_job_next_restart_works(tmp):
    out = os.path.join(tmp, "p")
    os.makedirs(out)
    events = os.path.join(tmp, "ev.jsonl")
    env = h.clean_env(PROBE_DIR=out, PROBE_TORCH="0", PROBE_EXIT="wait_file")
    proc = h.start(["--nproc-per-node=2", "--max-restarts", "1", "--events", events,
                    "--python", sys.executable, "--preload", "json", PROBE], env=env)
    try:
        h.wait_for_files([os.path.join(out, "0.0.json"), os.path.join(out, "1.0.json")], 60)
        first = seen(out, 1)
        assert forked(first) and first["ppid"] == proc.pid
        zygotes = [p for p in h.group_members(zygote_group(proc.pid))]
        assert len(zygotes) == 1, zygotes
        os.kill(zygotes[0], signal.SIGKILL)
        h.wait_until(lambda: h.proc_stat(zygotes[0]) is None, 10, "the zygote to die")
        # Its replacement imports in the background; workers started before it is ready are
        # exec'd (docs/warm-start.md). Restart once it waits for requests.
        workers = {seen(out, r)["pid"] for r in (0, 1)}
        h.wait_until(lambda: replacement_ready(proc.pid, workers | set(zygotes)), 60,
                     "the replacement zygote")
        with open(os.path.join(out, "go"), "w"):
            pass
        _, err = proc.communicate(timeout=120)
    finally:
        h.stop(proc)
    assert proc.returncode == 0, err
    again = seen(out, 1, 1)
    assert forked(again), again["cmdline"]
    assert again["ppid"] == proc.pid
    assert not [e for e in h.read_events(events) if e["event"] == "preload_disabled"]
    assert_nothing_left(first["token"])


def replacement_ready(ddprun_pid, not_these):
    """A zygote among ddprun's children, not in not_these, blocked in recvmsg (its requests)
    for 0.2 s on end."""
    for entry in os.listdir("/proc"):
        pid = int(entry) if entry.isdigit() else 0
        st = h.proc_stat(pid) if pid else None
        if not st or st[1] != ddprun_pid or pid in not_these:
            continue
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                if ZYGOTE_MARK not in f.read():
                    continue
            if os.uname().machine != "x86_64":  # syscall numbers differ: give it time instead
                time.sleep(3)
                return True
            for _ in range(10):
                with open(f"/proc/{pid}/syscall") as f:
                    if f.read().split()[0] != "47":  # recvmsg (x86_64)
                        return False
                time.sleep(0.02)
            return True
        except (OSError, IndexError):
            return False
    return False


def zygote_group(ddprun_pid):
    """The process group of ddprun's child that runs the zygote."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = h.proc_stat(int(entry))
            if st and st[1] == ddprun_pid:
                try:
                    with open(f"/proc/{entry}/cmdline") as f:
                        if ZYGOTE_MARK in f.read():
                            return st[2]
                except OSError:
                    pass
    raise AssertionError("no zygote among ddprun's children")


def test_sigkilled_ddprun_leaves_nothing(tmp):
    out = os.path.join(tmp, "p")
    os.makedirs(out)
    env = h.clean_env(PROBE_DIR=out, PROBE_TORCH="0", PROBE_EXIT="wait_file")
    proc = h.start(["--nproc-per-node=2", "--python", sys.executable, "--preload", "json", PROBE],
                   env=env)
    try:
        h.wait_for_files([os.path.join(out, "0.0.json"), os.path.join(out, "1.0.json")], 60)
        token = seen(out, 0)["token"]
        assert processes_with(token)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert_nothing_left(token)
    finally:
        h.stop(proc)


def is_forked(pid):
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return ZYGOTE_MARK in f.read()
    except OSError:
        return None  # gone


def test_elastic_reform_forks_the_survivors_new_workers(tmp):
    import test_elastic as el  # modules, not names: h.main runs this module's test_* only
    import test_multinode as mn
    late = os.path.join(tmp, "late")
    open(late, "w").close()  # attempt 1's workers linger 1.5 s: long enough to look at them
    os.environ["DDP_LATE_IF"] = late
    store = el.Store()
    try:
        nodes = el.agents(tmp, store.port, 3, "2:3", extra=["--preload", "json"])
    finally:
        del os.environ["DDP_LATE_IF"]

    def started(node):
        return [e["pid"] for e in el.events(node, "worker_start")]
    try:
        h.wait_until(lambda: all(len(started(n)) == 1 for n in nodes), 60, "workers on 3 agents")
        assert all(is_forked(started(n)[0]) for n in nodes), nodes
        el.kill_agent(nodes[1])
        survivors = [nodes[0], nodes[2]]
        h.wait_until(lambda: all(len(started(n)) == 2 for n in survivors), 60, "re-formed workers")
        assert [is_forked(started(n)[1]) for n in survivors] == [True, True], survivors
        assert mn.finish(survivors) == [0, 0], survivors
        h.wait_until(lambda: is_forked(started(nodes[1])[0]) is None, 10, "the lost agent's worker")
    finally:
        mn.finish(nodes)
        store.close()
    for node in survivors:
        assert el.one_rescale(node)["new_world_size"] == 2, node
        assert not el.events(node, "preload_disabled"), node


HEALTH_JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "health",
                           "integration", "jobs")


def test_health_verdicts_stacks_timer_and_record_on_forked_workers(tmp):
    """The hang verdict's py-spy stacks, torch's file timer and @record error files, through
    --preload torch (the same jobs as tests/health/integration, exec'd there)."""
    if not have_torch():
        raise h.Skip("python3 has no torch")
    events = os.path.join(tmp, "hang.jsonl")
    r = h.run(["--preload", "torch", "--nproc-per-node", "2", "--hang-timeout", "5", "--events",
               events, os.path.join(HEALTH_JOBS, "gloo_steps.py"), "--steps", "50", "--log",
               "--hang-rank", "1", "--hang-step", "3", "--pid-dir", tmp], timeout=180)
    assert r.rc == 75, r
    ev = h.read_events(events)
    assert [e for e in ev if e["event"] == "preload"], ev
    saved = [e for e in ev if e["event"] == "stacks_saved"]
    assert len(saved) == 1, ev
    files = {f["rank"]: f for f in saved[0]["files"]}
    with open(files[1]["path"]) as fh:
        stacks1 = fh.read()
    assert files[1]["tool"] == "py-spy" and "sleep_forever_inside_epoch" in stacks1, stacks1

    events = os.path.join(tmp, "timer.jsonl")
    r = h.run(["--preload", "torch", "--nproc-per-node", "2", "--events", events,
               os.path.join(HEALTH_JOBS, "timer_job.py")], timeout=180,
              env=h.clean_env(TORCHELASTIC_ENABLE_FILE_TIMER="1", PID_DIR=tmp))
    assert r.rc == 137, r
    expired = [e for e in h.read_events(events) if e["event"] == "timer_expired"]
    assert len(expired) == 1 and expired[0]["rank"] == 1, expired

    script = os.path.join(tmp, "recorded.py")
    with open(script, "w") as f:
        f.write("import os\n"
                "from torch.distributed.elastic.multiprocessing.errors import record\n"
                "@record\n"
                "def main():\n"
                "    if os.environ['RANK'] == '1':\n"
                "        raise RuntimeError('recorded failure of rank 1')\n"
                "main()\n")
    events = os.path.join(tmp, "record.jsonl")
    r = h.run(["--preload", "torch", "--nproc-per-node", "2", "--events", events, script],
              timeout=180)
    assert r.rc == 1, r
    summary = [e for e in h.read_events(events) if e["event"] == "summary"][0]
    assert "recorded failure of rank 1" in json.dumps(summary), summary


if __name__ == "__main__":
    h.main(globals())
