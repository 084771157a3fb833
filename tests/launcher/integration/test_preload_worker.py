# SPDX-License-Identifier: MIT
"""--preload, issue 35 (docs/warm-start.md): a forked worker is claimed before it runs (never two
processes for one rank, whenever the zygote dies), keeps what the preloaded modules own
(descriptors, environment, argv at import), gets its own secrets and memory policy, large
requests work, the zygote is never waited for (signals during the imports, a stopped zygote,
--preload-timeout), and nothing the zygote's modules started outlives the job.

Cheap on purpose: the preloads are tiny modules written here (json where any will do).
Run: python3 test_preload_worker.py [test_name...]   (DDPRUN = the ddprun binary)
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

ZYGOTE_MARK = "<ddprun-zygote>"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def marked_children(ppid):
    """ddprun's live children that run the zygote's program (the zygote, forked workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = h.proc_stat(int(entry))
            if st and st[1] == ppid and ZYGOTE_MARK in cmdline(int(entry)):
                found.append(int(entry))
    return found


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def age(pid):
    """Seconds since the process started (None when gone)."""
    ticks = start_time(pid)
    if ticks is None:
        return None
    with open("/proc/uptime") as f:
        return float(f.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")


def waits_for_requests(pid):
    """The zygote is blocked in recvmsg (x86_64's 47): ready. Elsewhere: alive for 1 s."""
    if os.uname().machine != "x86_64":
        return (age(pid) or 0) > 1
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == "47"
    except (OSError, IndexError):
        return False


def alive(pid):
    return h.proc_stat(pid) is not None


def run_both(tmp, name, script, preload, extra=(), env=None, nproc=2, timeout=90):
    """The same job exec'd and forked: {"exec": Run, "fork": Run} and their events."""
    out = {}
    for kind in ("exec", "fork"):
        events = os.path.join(tmp, f"{name}-{kind}.jsonl")
        args = [f"--nproc-per-node={nproc}", "--events", events, "--python", sys.executable]
        if kind == "fork":
            args += ["--preload", preload]
        e = h.clean_env(OUT=os.path.join(tmp, f"{name}-{kind}"), **(env or {}))
        os.makedirs(e["OUT"])
        run = h.run(args + list(extra) + [script], timeout=timeout, env=e, cwd=tmp)
        out[kind] = (run, h.read_events(events), e["OUT"])
    return out


# 1. Claim before run ---------------------------------------------------------------------------

CLAIM_JOB = """\
import os, random, sys, time
with open(os.environ['RECORDS'], 'a') as f:  # one line per process that runs the script
    f.write('%s %s %d %d\\n' % (os.environ['TORCHELASTIC_RESTART_COUNT'], os.environ['RANK'],
                                os.getpid(), 'ddprun-zygote' in open('/proc/self/cmdline').read()))
if os.environ['RANK'] == '0':
    time.sleep(random.uniform(0, 0.03))
    sys.exit(1)
time.sleep(60)
"""


def test_zygote_killed_at_random_never_runs_a_rank_twice(tmp):
    """SIGKILL the zygote at random moments of many fork bursts (4 ranks per burst, a restart
    every ~0.1 s): every (attempt, rank) ran the script exactly once. Before the claim, a worker
    forked by a zygote that died before answering ran beside its replacement."""
    script = write(os.path.join(tmp, "claim.py"), CLAIM_JOB)
    records = os.path.join(tmp, "records")
    env = h.clean_env(RECORDS=records)
    err = open(os.path.join(tmp, "stderr"), "w")
    proc = h.start(["--nproc-per-node=4", "--max-restarts", "100000", "--python", sys.executable,
                    "--preload", "json", script], env=env, stdout=subprocess.DEVNULL, stderr=err)
    rng = random.Random(int(os.environ.get("CLAIM_SEED", "35")))
    kills = 0
    budget = float(os.environ.get("CLAIM_SECONDS", "40"))
    deadline = time.monotonic() + budget
    try:
        h.wait_until(lambda: os.path.exists(records), 60, "the first workers")
        while kills < 200 and time.monotonic() < deadline:
            time.sleep(0.01)
            with open(records) as f:
                workers = {int(line.split()[2]) for line in f if len(line.split()) == 4}
            candidates = [p for p in marked_children(proc.pid) if p not in workers]
            # The zygote: the oldest marked child that never ran the script, once it waits for
            # requests (a replacement still importing is left alone: three deaths in a row
            # before ready give the preload up, and then nothing more would be forked). Then a
            # random moment: idle, or in the middle of a fork burst.
            candidates = sorted((start_time(p) or 0, p) for p in candidates)
            if not candidates or not waits_for_requests(candidates[0][1]):
                continue
            time.sleep(rng.uniform(0, 0.15))
            try:
                os.kill(candidates[0][1], signal.SIGKILL)
                kills += 1
            except ProcessLookupError:
                pass
        assert proc.poll() is None, "ddprun ended under the zygote kills"
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        h.stop(proc)
    err.close()
    with open(os.path.join(tmp, "stderr")) as f:
        preload_lines = [l for l in f if l.startswith("ddprun: --preload")]
    with open(records) as f:
        lines = [line.split() for line in f if len(line.split()) == 4]
    starts = {}
    for attempt, rank, pid, forked in lines:
        starts.setdefault((int(attempt), int(rank)), []).append((int(pid), forked == "1"))
    twice = {k: v for k, v in starts.items() if len(v) > 1}
    attempts = max(a for a, _ in starts) + 1
    forked = sum(1 for v in starts.values() for _, f in v if f)
    print(f"  {kills} zygote kills over {attempts} attempts; {forked} of {len(lines)} workers "
          f"forked")
    assert not twice, f"ranks that ran twice in one attempt: {twice}"
    assert kills >= 15 and attempts >= 10, (kills, attempts, preload_lines)
    assert forked >= 8, "hardly any worker was forked: the test proves little"


# 2. Keep what the preloaded modules own; per-process secrets ------------------------------------

OWN_MODULE = """\
import json, logging, multiprocessing, os, random, sys
logging.basicConfig(filename=os.path.join(os.environ['OUT'], 'module.log'), level=logging.INFO,
                    format='%(message)s')
os.environ.setdefault('OWNMOD_AT_IMPORT', 'set by the module')
ARGV_AT_IMPORT = list(sys.argv)
GENERATOR_DRAW = None
"""

OWN_SCRIPT = """\
import json, logging, multiprocessing, os, sys
import ownmod
rank = os.environ['RANK']
out = os.environ['OUT']
paths = [os.path.join(out, 'ckpt%s-%d' % (rank, i)) for i in range(2)]
files = [open(p, 'w') for p in paths]
for i, f in enumerate(files):
    f.write('checkpoint %s %d\\n' % (rank, i))
logging.info('log line of rank %s', rank)
for f in files:
    f.close()
with open(os.path.join(out, 'seen%s.json' % rank), 'w') as f:
    json.dump({'argv_at_import': ownmod.ARGV_AT_IMPORT, 'argv': sys.argv,
               'env': os.environ.get('OWNMOD_AT_IMPORT'),
               'authkey': bytes(multiprocessing.current_process().authkey).hex(),
               'forked': 'ddprun-zygote' in open('/proc/self/cmdline').read()}, f)
"""


def test_forked_worker_keeps_what_the_modules_own(tmp):
    write(os.path.join(tmp, "ownmod.py"), OWN_MODULE)
    script = write(os.path.join(tmp, "own.py"), OWN_SCRIPT)
    both = run_both(tmp, "own", script, "ownmod")
    seen = {}
    for kind, (run, events, out) in both.items():
        assert run.rc == 0, f"{kind}: {run}"
        with open(os.path.join(out, "module.log")) as f:
            log = f.read()
        for rank in (0, 1):
            assert f"log line of rank {rank}" in log, f"{kind}: the module's log: {log!r}"
            for i in (0, 1):
                with open(os.path.join(out, f"ckpt{rank}-{i}")) as f:
                    assert f.read() == f"checkpoint {rank} {i}\n", f"{kind}: ckpt{rank}-{i}"
        seen[kind] = [json.load(open(os.path.join(out, f"seen{r}.json"))) for r in (0, 1)]
    assert all(s["forked"] for s in seen["fork"]) and not any(s["forked"] for s in seen["exec"])
    for e, f in zip(seen["exec"], seen["fork"]):
        assert f["env"] == e["env"] == "set by the module", (e, f)
        assert f["argv_at_import"] == e["argv_at_import"] == e["argv"], (e, f)
    keys = [s["authkey"] for s in seen["fork"]] + [s["authkey"] for s in seen["exec"]]
    assert len(set(keys)) == 4, f"multiprocessing authkeys repeat: {keys}"


def test_argv_at_import_with_arguments(tmp):
    write(os.path.join(tmp, "argvmod.py"), "import sys\nARGV = list(sys.argv)\n")
    script = write(os.path.join(tmp, "argv.py"),
                   "import argvmod, json, os, sys\n"
                   "print('ARGV', json.dumps([argvmod.ARGV, sys.argv]))\n")
    for preload in (None, "argvmod"):
        args = ["--nproc-per-node=1", "--python", sys.executable]
        if preload:
            args += ["--preload", preload]
        run = h.run(args + [script, "--lr", "0.1", "x y"], timeout=60, cwd=tmp)
        assert run.rc == 0, run
        line = [l for l in run.out.splitlines() if "ARGV" in l][0]
        at_import, argv = json.loads(line.split("ARGV", 1)[1])
        assert at_import == argv == [script, "--lr", "0.1", "x y"], (preload, at_import, argv)


# Item 15: a failing forked worker's exit does not walk the preloaded heap ----------------------

HEAPMOD = """\
import atexit, os
TABLE = [[i, str(i)] for i in range(20000)]  # a preloaded heap (lists: all tracked)
def _written_at_exit():
    with open(os.path.join(os.environ['OUT'], 'atexit%s' % os.environ['RANK']), 'w') as f:
        f.write('ran')
atexit.register(_written_at_exit)
"""

HEAP_SCRIPT = """\
import gc, json, os, sys, weakref
import heapmod
class Node:
    pass
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle of the script's own: the collector still frees it
gone = weakref.ref(a)
del a, b
gc.collect()
out = open(os.path.join(os.environ['OUT'], 'buffered%s' % os.environ['RANK']), 'w')
out.write('flushed by the exit')  # left open and unflushed: the interpreter's exit writes it
print('HEAP', json.dumps({'frozen': gc.get_freeze_count(), 'enabled': gc.isenabled(),
                          'collected': gone() is None, 'table': len(heapmod.TABLE)}))
if os.environ['FAIL'] == 'exit':
    sys.exit(3)
raise RuntimeError('the script fails')
"""


def test_preloaded_heap_is_frozen_and_exits_match_exec(tmp):
    """The zygote freezes what the imports created (gc.freeze), so that a forked worker's
    collections, and its interpreter's exit, skip it; the exits are those of an exec'd worker:
    the code, the traceback, the atexit handlers, a file left open flushed."""
    write(os.path.join(tmp, "heapmod.py"), HEAPMOD)
    script = write(os.path.join(tmp, "heap.py"), HEAP_SCRIPT)
    for fail, code in (("exit", 3), ("raise", 1)):
        both = run_both(tmp, f"heap-{fail}", script, "heapmod", env={"FAIL": fail}, nproc=1)
        seen = {}
        for kind, (run, events, out) in both.items():
            assert run.rc == code, f"{kind} {fail}: {run}"
            lines = [l for l in run.out.splitlines() if "HEAP" in l]
            assert len(lines) == 1, f"{kind} {fail}: {run}"
            seen[kind] = json.loads(lines[0].split("HEAP", 1)[1])
            exits = [e.get("exit_code") for e in events if e["event"] == "worker_exit"]
            assert exits == [code], f"{kind} {fail}: {exits}"
            if fail == "raise":
                assert "RuntimeError: the script fails" in run.err, f"{kind}: {run}"
            with open(os.path.join(out, "atexit0")) as f:
                assert f.read() == "ran", f"{kind} {fail}: the atexit handler"
            with open(os.path.join(out, "buffered0")) as f:
                assert f.read() == "flushed by the exit", f"{kind} {fail}: the open file"
            assert not [e for e in events if e["event"] == "preload_disabled"], f"{kind}: {events}"
        e, f = seen["exec"], seen["fork"]
        assert e["frozen"] == 0 and f["frozen"] > 20000, (fail, e, f)
        assert e["enabled"] and f["enabled"] and e["collected"] and f["collected"], (e, f)
        assert e["table"] == f["table"] == 20000, (e, f)


# 3. Large requests -----------------------------------------------------------------------------

def test_large_argument_and_environment_are_forked(tmp):
    script = write(os.path.join(tmp, "big.py"),
                   "import os, sys\n"
                   "print('SIZES', len(sys.argv[1]), len(os.environ['BIG1']), "
                   "len(os.environ['BIG2']), 'ddprun-zygote' in open('/proc/self/cmdline').read())\n")
    big = "a" * 110_000
    events = os.path.join(tmp, "ev.jsonl")
    env = h.clean_env(BIG1="b" * 110_000, BIG2="c" * 110_000)
    run = h.run(["--nproc-per-node=2", "--events", events, "--python", sys.executable,
                 "--preload", "json", script, big], timeout=60, env=env, cwd=tmp)
    assert run.rc == 0, run
    sizes = [l.split("SIZES", 1)[1].split() for l in run.out.splitlines() if "SIZES" in l]
    assert sizes == [["110000", "110000", "110000", "True"]] * 2, sizes
    assert not [e for e in h.read_events(events) if e["event"] == "preload_disabled"]


# 4. The event loop never waits on the zygote ---------------------------------------------------

def test_signal_during_a_hanging_import_ends_ddprun(tmp):
    write(os.path.join(tmp, "hangmod.py"), "import time\ntime.sleep(600)\n")
    script = write(os.path.join(tmp, "ok.py"), "print('ran')\n")
    for sig in (signal.SIGINT, signal.SIGTERM):
        proc = h.start(["--nproc-per-node=2", "--python", sys.executable, "--preload", "hangmod",
                        script], env=h.clean_env())
        try:
            h.wait_until(lambda: marked_children(proc.pid), 30, "the zygote")
            zygote = marked_children(proc.pid)[0]
            time.sleep(0.5)
            sent = time.monotonic()
            os.kill(proc.pid, sig)
            out, err = proc.communicate(timeout=20)
            took = time.monotonic() - sent
        finally:
            h.stop(proc)
        assert took < 5, f"{sig!r}: ddprun took {took:.1f} s to end\n{err}"
        assert proc.returncode == 128 + sig, (proc.returncode, err)
        assert "ran" not in out, out
        h.wait_until(lambda: not alive(zygote), 10, "the zygote to be gone")


def test_preload_timeout_execs_the_workers(tmp):
    write(os.path.join(tmp, "slowmod.py"), "import time\ntime.sleep(600)\n")
    script = write(os.path.join(tmp, "ok.py"),
                   "print('ran', 'ddprun-zygote' in open('/proc/self/cmdline').read())\n")
    events = os.path.join(tmp, "ev.jsonl")
    run = h.run(["--nproc-per-node=2", "--events", events, "--python", sys.executable,
                 "--preload", "slowmod", "--preload-timeout", "1.5", script], timeout=60, cwd=tmp)
    assert run.rc == 0, run
    assert run.out.count("ran False") == 2, run
    said = [l for l in h.ddprun_lines(run.err) if "--preload" in l]
    assert len(said) == 1 and "did not finish importing within 1.5 s" in said[0], run
    disabled = [e for e in h.read_events(events) if e["event"] == "preload_disabled"]
    assert len(disabled) == 1, disabled
    run = h.run(["--nproc-per-node=1", "--preload", "json", "--preload-timeout", "0", script],
                timeout=30, cwd=tmp)
    assert run.rc == 2 and "--preload-timeout" in run.err, run


STOP_JOB = """\
import os, sys, time
out = os.environ['OUT']
rank, attempt = os.environ['RANK'], os.environ['TORCHELASTIC_RESTART_COUNT']
with open(os.path.join(out, '%s.%s' % (rank, attempt)), 'w') as f:
    f.write('%d %d' % (os.getpid(), 'ddprun-zygote' in open('/proc/self/cmdline').read()))
if attempt == '0':
    while not os.path.exists(os.path.join(out, 'go')):
        time.sleep(0.02)
    if rank == '1':
        sys.exit(3)
    time.sleep(60)
"""


def test_stopped_zygote_is_given_up_within_seconds(tmp):
    """A SIGSTOPped zygote: the restart execs the workers within ~2 s, one line, one event."""
    out = os.path.join(tmp, "out")
    os.makedirs(out)
    script = write(os.path.join(tmp, "stop.py"), STOP_JOB)
    events = os.path.join(tmp, "ev.jsonl")
    proc = h.start(["--nproc-per-node=2", "--max-restarts", "1", "--events", events, "--python",
                    sys.executable, "--preload", "json", script], env=h.clean_env(OUT=out))
    try:
        h.wait_for_files([os.path.join(out, "0.0"), os.path.join(out, "1.0")], 60)
        workers = {int(open(os.path.join(out, f"{r}.0")).read().split()[0]) for r in (0, 1)}
        zygote = [p for p in marked_children(proc.pid) if p not in workers]
        assert len(zygote) == 1, zygote
        os.kill(zygote[0], signal.SIGSTOP)
        write(os.path.join(out, "go"), "")
        went = time.monotonic()
        h.wait_for_files([os.path.join(out, "0.1"), os.path.join(out, "1.1")], 30)
        took = time.monotonic() - went
        _, err = proc.communicate(timeout=60)
    finally:
        h.stop(proc)
    assert proc.returncode == 0, err
    assert took < 8, f"the restart took {took:.1f} s"
    for r in (0, 1):
        assert open(os.path.join(out, f"{r}.1")).read().split()[1] == "0", "forked after all?"
    said = [l for l in h.ddprun_lines(err) if "--preload" in l]
    assert len(said) == 1 and "no answer within 2 s" in said[0], err
    assert len([e for e in h.read_events(events) if e["event"] == "preload_disabled"]) == 1
    h.wait_until(lambda: not alive(zygote[0]), 10, "the stopped zygote to be gone")


# 5. --numa-binding: the memory policy ----------------------------------------------------------

def test_numa_binding_memory_policy_matches_exec(tmp):
    if not os.path.exists("/sys/devices/system/node/node0"):
        raise h.Skip("no NUMA node 0")
    script = write(os.path.join(tmp, "numa.py"),
                   "import os\n"
                   "first = open('/proc/self/numa_maps').readline().split()[1]\n"
                   "print('POLICY', os.environ['RANK'], first,\n"
                   "      'ddprun-zygote' in open('/proc/self/cmdline').read())\n")
    policies = {}
    for preload in (None, "json"):
        args = ["--nproc-per-node=2", "--numa-binding", "node", "--python", sys.executable]
        if preload:
            args += ["--preload", preload]
        run = h.run(args + [script], timeout=60, cwd=tmp)
        assert run.rc == 0, run
        lines = sorted(l.split("POLICY", 1)[1].split() for l in run.out.splitlines()
                       if "POLICY" in l)
        assert [l[2] for l in lines] == (["True", "True"] if preload else ["False", "False"]), run
        policies[preload] = [l[1] for l in lines]
    assert policies[None] == policies["json"], policies
    assert all(p != "default" for p in policies[None]), policies


# 6. Nothing outlives the job -------------------------------------------------------------------

def test_helpers_started_at_import_end_with_the_job(tmp):
    """A module that starts a helper process at import (a child of the zygote: refused, like a
    thread; a daemon: allowed): after exit 0 the helper is gone and ddprun's pipes read EOF."""
    pidfile = os.path.join(tmp, "helper.pid")
    write(os.path.join(tmp, "childmod.py"),
          "import subprocess, sys\n"
          f"p = subprocess.Popen(['sleep', '600'])\n"
          f"open({pidfile!r}, 'w').write(str(p.pid))\n")
    write(os.path.join(tmp, "daemonmod.py"),
          "import os\n"
          "if os.fork() == 0:\n"
          "    os.setsid()\n"
          "    if os.fork() == 0:\n"
          f"        open({pidfile!r}, 'w').write(str(os.getpid()))\n"
          "        os.execvp('sleep', ['sleep', '600'])\n"
          "    os._exit(0)\n"
          "os.wait()\n"
          "import time\n"
          f"while not os.path.exists({pidfile!r}): time.sleep(0.01)\n")
    script = write(os.path.join(tmp, "ok.py"),
                   "print('ran', 'ddprun-zygote' in open('/proc/self/cmdline').read())\n")
    for module, forked in (("childmod", False), ("daemonmod", True)):
        if os.path.exists(pidfile):
            os.remove(pidfile)
        events = os.path.join(tmp, f"{module}.jsonl")
        # h.run reads both pipes to EOF: a helper that holds them makes it time out.
        run = h.run(["--nproc-per-node=2", "--events", events, "--python", sys.executable,
                     "--preload", module, script], timeout=30, cwd=tmp)
        assert run.rc == 0, run
        assert run.out.count(f"ran {forked}") == 2, run
        helper = int(open(pidfile).read())
        h.wait_until(lambda: not alive(helper), 5, f"{module}'s helper {helper} to be gone")
        disabled = [e for e in h.read_events(events) if e["event"] == "preload_disabled"]
        if not forked:
            assert len(disabled) == 1 and "child process" in disabled[0]["reason"], disabled


# 7. What the preloaded modules change at import: forked workers see it as exec'd ones do ------

def test_a_module_that_wraps_os_fork_does_not_fail_the_job(tmp):
    """A module whose os.fork forks once more in the child (a tracer's re-init): the zygote
    forks with the real fork, so each rank runs once, forked, and the job succeeds (not 70)."""
    write(os.path.join(tmp, "forkwrap.py"),
          "import os\n"
          "_real = os.fork\n"
          "def fork():\n"
          "    pid = _real()\n"
          "    if pid == 0 and _real() == 0:\n"
          "        pass\n"
          "    return pid\n"
          "os.fork = fork\n")
    script = write(os.path.join(tmp, "once.py"),
                   "import os\n"
                   "print('RAN', os.environ['RANK'], "
                   "'ddprun-zygote' in open('/proc/self/cmdline').read(), flush=True)\n")
    events = os.path.join(tmp, "ev.jsonl")
    run = h.run(["--nproc-per-node=2", "--events", events, "--python", sys.executable,
                 "--preload", "forkwrap", script], timeout=60, cwd=tmp)
    assert run.rc == 0, run
    ran = sorted(l.split("RAN", 1)[1].split() for l in run.out.splitlines() if "RAN" in l)
    assert ran == [["0", "True"], ["1", "True"]], run
    assert not [e for e in h.read_events(events) if e["event"] == "preload_disabled"]


def test_a_module_that_makes_os_fork_raise_still_gets_forked_workers(tmp):
    """A module that forbids fork (os.fork raises): the zygote's own forks are not the
    program's, so the ranks are forked, and their os.fork raises as in an exec'd worker."""
    write(os.path.join(tmp, "nofork.py"),
          "import os\n"
          "def fork():\n"
          "    raise OSError(11, 'fork patched out')\n"
          "os.fork = fork\n")
    script = write(os.path.join(tmp, "nofork_job.py"),
                   "import os, nofork\n"
                   "try:\n"
                   "    os.fork()\n"
                   "    own = 'forked'\n"
                   "except OSError:\n"
                   "    own = 'raised'\n"
                   "print('RAN', os.environ['RANK'], own, "
                   "'ddprun-zygote' in open('/proc/self/cmdline').read(), flush=True)\n")
    events = os.path.join(tmp, "ev.jsonl")
    run = h.run(["--nproc-per-node=2", "--events", events, "--python", sys.executable,
                 "--preload", "nofork", script], timeout=60, cwd=tmp)
    assert run.rc == 0, run
    ran = sorted(l.split("RAN", 1)[1].split() for l in run.out.splitlines() if "RAN" in l)
    assert ran == [["0", "raised", "True"], ["1", "raised", "True"]], run
    assert "Traceback" not in run.out + run.err, run
    assert not [e for e in h.read_events(events) if e["event"] == "preload_disabled"]


def test_a_failed_setup_of_a_forked_worker_execs_it(tmp):
    """Whatever fails in a forked worker before it runs the program (here a module's wrapper of
    signal.pthread_sigmask that raises) makes ddprun exec that rank and give --preload up with
    one line and a preload_disabled event, never exit 70 or a failed rank."""
    write(os.path.join(tmp, "badmask.py"),
          "import signal\n"
          "def pthread_sigmask(*args):\n"
          "    raise RuntimeError('wrapped')\n"
          "signal.pthread_sigmask = pthread_sigmask\n")
    script = write(os.path.join(tmp, "mask_job.py"),
                   "import os\n"
                   "print('RAN', os.environ['RANK'], "
                   "'ddprun-zygote' in open('/proc/self/cmdline').read(), flush=True)\n")
    events = os.path.join(tmp, "ev.jsonl")
    run = h.run(["--nproc-per-node=2", "--events", events, "--python", sys.executable,
                 "--preload", "badmask", script], timeout=60, cwd=tmp)
    assert run.rc == 0, run
    ran = sorted(l.split("RAN", 1)[1].split() for l in run.out.splitlines() if "RAN" in l)
    assert ran == [["0", "False"], ["1", "False"]], run
    assert (run.out + run.err).count("ddprun: --preload") == 1, run
    assert "Traceback" not in run.out + run.err, run
    disabled = [e for e in h.read_events(events) if e["event"] == "preload_disabled"]
    assert len(disabled) == 1 and "set itself up" in disabled[0]["reason"], disabled


STATE_MODULE = """\
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), 'plugins'))  # a plugin directory
sys.argv.append('--from-module')
os.umask(0o077)
os.chdir('sub')
os.environ.pop('DROPPED_BY_MODULE', None)
os.environ['CHANGED_BY_MODULE'] = 'by the module'
"""

STATE_SCRIPT = """\
import json, os, stat, sys, statemod
import plugin
path = os.path.join(os.environ['OUT'], 'file%s' % os.environ['RANK'])
open(path, 'w').close()
json.dump({'path': sys.path[:2], 'argv': sys.argv, 'cwd': os.getcwd(), 'plugin': plugin.X,
           'mode': oct(stat.S_IMODE(os.stat(path).st_mode)),
           'dropped': os.environ.get('DROPPED_BY_MODULE'),
           'changed': os.environ.get('CHANGED_BY_MODULE'), 'rank': os.environ.get('RANK'),
           'forked': 'ddprun-zygote' in open('/proc/self/cmdline').read()},
          open(os.path.join(os.environ['OUT'], 'state%s.json' % os.environ['RANK']), 'w'))
"""


def test_state_the_modules_set_at_import_is_kept_as_in_exec(tmp):
    """sys.path entries and argv the imports added, their umask and working directory (ddprun
    sets neither), environment variables they removed or changed (ddprun gives them as it got
    them): a forked worker has them as an exec'd one does; a relative script still runs."""
    os.makedirs(os.path.join(tmp, "plugins"))
    os.makedirs(os.path.join(tmp, "sub"))
    write(os.path.join(tmp, "plugins", "plugin.py"), "X = 'plugin ok'\n")
    write(os.path.join(tmp, "statemod.py"), STATE_MODULE)
    write(os.path.join(tmp, "state.py"), STATE_SCRIPT)
    both = run_both(tmp, "state", "state.py", "statemod", extra=["--max-restarts=0"],
                    env={"DROPPED_BY_MODULE": "x", "CHANGED_BY_MODULE": "inherited"})
    seen = {}
    for kind, (run, events, out) in both.items():
        assert run.rc == 0, f"{kind}: {run}"
        seen[kind] = [json.load(open(os.path.join(out, f"state{r}.json"))) for r in (0, 1)]
    assert all(s.pop("forked") for s in seen["fork"]), seen
    assert not any(s.pop("forked") for s in seen["exec"]), seen
    assert seen["fork"] == seen["exec"], seen
    first = seen["exec"][0]
    assert first["path"] == [os.path.join(tmp, "plugins"), tmp], first
    assert first["argv"] == ["state.py", "--from-module"], first
    assert first["mode"] == "0o600" and first["cwd"] == os.path.join(tmp, "sub"), first
    assert first["dropped"] is None and first["changed"] == "by the module", first


def test_helpers_of_the_interpreter_do_not_get_the_zygote_killed(tmp):
    """A python3 that is a shim (pyenv's) leaves helpers in the zygote's process group that
    re-parent to ddprun: the end of an attempt does not sweep them, nor the zygote with them, so
    the restart's workers are forked too."""
    shim = write(os.path.join(tmp, "python3"),
                 "#!/bin/sh\n"
                 "(sleep 30 </dev/null >/dev/null 2>&1 &)\n"
                 f"exec {sys.executable} \"$@\"\n")
    os.chmod(shim, 0o755)
    script = write(os.path.join(tmp, "restart.py"),
                   "import os, sys, time\n"
                   "print('RAN', os.environ['TORCHELASTIC_RESTART_COUNT'], os.environ['RANK'], "
                   "'ddprun-zygote' in open('/proc/self/cmdline').read(), flush=True)\n"
                   "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0':\n"
                   "    time.sleep(0.5)\n"
                   "    sys.exit(1)\n")
    events = os.path.join(tmp, "ev.jsonl")
    run = h.run(["--nproc-per-node=2", "--max-restarts=1", "--events", events, "--python", shim,
                 "--preload", "json", script], timeout=60, cwd=tmp)
    assert run.rc == 0, run
    ran = sorted(l.split("RAN", 1)[1].split() for l in run.out.splitlines() if "RAN" in l)
    assert ran == [[a, r, "True"] for a in "01" for r in "01"], run
    evs = h.read_events(events)
    assert not [e for e in evs if e["event"] in ("preload_disabled", "leftovers_killed")], evs


if __name__ == "__main__":
    h.main(globals())
