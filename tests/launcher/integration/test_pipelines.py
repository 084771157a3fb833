# SPDX-License-Identifier: MIT
"""ddprun in shell pipelines (issue 11): raw lines with --no-prefix, a pure JSON-lines stdout with
--events -, --events fd:N, NO_COLOR/--color under a pseudo-terminal, notices on stderr only, a
closed stdout, PET_ only for torchrun's flags, completions, ddprun-store's CLI."""
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time

from harness import DDPRUN, clean_env, helper, main, run

LINE = re.compile(r"^r(\d+) (\d+) x{40}$")


def test_jq_consumes_events_while_workers_print_non_json(tmp):
    # Workers print plain text on stdout and stderr; with --events -, stdout holds only events.
    script = "echo not json from $RANK; echo '{\"partial\": ' ; echo oops >&2"
    ddprun = subprocess.Popen([DDPRUN, "--events", "-", "--nproc_per_node", "3", "sh", "-c", script],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(),
                              start_new_session=True)
    jq = subprocess.run(["jq", "-c", "select(.event == \"worker_exit\") | .rank"],
                        stdin=ddprun.stdout, capture_output=True, text=True, timeout=60)
    ddprun.stdout.close()
    err = ddprun.stderr.read().decode()
    assert ddprun.wait(timeout=60) == 0, err
    assert jq.returncode == 0, jq.stderr  # jq fails on the first line that is not JSON
    assert sorted(jq.stdout.split()) == ["0", "1", "2"], jq.stdout
    for rank in range(3):  # the workers' stdout went to stderr, prefixed as usual
        assert f"[rank{rank}]:not json from {rank}" in err, err
        assert f"[rank{rank}]:oops" in err, err


def test_events_to_an_inherited_descriptor(tmp):
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([DDPRUN, "--events", f"fd:{write_end}", "--nproc_per_node", "2",
                             "sh", "-c", "echo hello"], pass_fds=(write_end,),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(),
                            text=True, start_new_session=True)
    os.close(write_end)
    with os.fdopen(read_end) as events:
        lines = events.read().splitlines()  # EOF: neither ddprun nor a worker keeps the fd open
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    kinds = [json.loads(line)["event"] for line in lines]
    assert kinds[0] == "launch" and kinds[-1] == "summary" and kinds.count("worker_exit") == 2, kinds
    assert "[rank0]:hello" in out and "event" not in out, out
    # A descriptor that is not open is one line and exit 2.
    r = run(["--events", "fd:63", "/bin/true"])
    assert r.rc == 2 and r.err == "ddprun: --events fd:63: descriptor 63 is not open\n", r


def test_no_prefix_is_byte_identical_to_the_program(tmp):
    data = os.path.join(tmp, "data.bin")
    with open(data, "wb") as f:  # every byte value but '\n' inside lines, ending in a newline
        for n in range(300):
            f.write(bytes((b + n) % 256 for b in range(256) if (b + n) % 256 != 10) + b"\n")
    direct = subprocess.run(["cat", data], capture_output=True).stdout
    r = subprocess.run([DDPRUN, "--no-prefix", "cat", data], capture_output=True, env=clean_env(),
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == direct
    # The template form (torchrun's), from the environment as in torchrun.
    r = run(["--nproc_per_node", "2", "sh", "-c", "echo hi"],
            env=clean_env(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="<${role_name}:${rank}:${local_rank}> "))
    assert sorted(r.out.splitlines()) == ["<default:0:0> hi", "<default:1:1> hi"], r
    r = run(["--nproc_per_node", "2", "--role", "trainer", "--log-line-prefix-template", "$rank|",
             "sh", "-c", "echo hi"])
    assert sorted(r.out.splitlines()) == ["0|hi", "1|hi"], r


def test_no_prefix_lines_are_never_torn_through_a_slow_pipe(tmp):
    # Four workers flood a pipe whose reader is slow: every line still arrives whole and in order.
    proc = subprocess.Popen([DDPRUN, "--no-prefix", "--nproc_per_node", "4", helper("output_flooder"),
                             "20000", "40"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=clean_env(), start_new_session=True)
    chunks = []
    while True:
        chunk = proc.stdout.read1(4096)
        if not chunk:
            break
        chunks.append(chunk)
        if len(chunks) % 64 == 0:
            time.sleep(0.01)  # a slow consumer: ddprun's queue and the workers' pipes fill up
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    next_seq, ends = {}, set()
    for n, line in enumerate(b"".join(chunks).decode().split("\n")[:-1]):
        m = LINE.match(line)
        if m:
            rank, seq = int(m.group(1)), int(m.group(2))
            assert next_seq.get(rank, 0) == seq, f"line {n}: {line[:80]!r}"
            next_seq[rank] = seq + 1
        else:
            assert re.fullmatch(r"r\d+ end", line), f"torn line {n}: {line[:200]!r}"
            ends.add(line)
    assert next_seq == {r: 20000 for r in range(4)} and len(ends) == 4, next_seq


def run_on_pty(args, env):
    """Runs ddprun with stdout and stderr on a pseudo-terminal; returns everything it printed."""
    pid, master = pty.fork()
    if pid == 0:
        os.execve(DDPRUN, [DDPRUN] + args, env)
    output = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if not ready:
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child side is closed
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    os.close(master)
    assert os.waitstatus_to_exitcode(status) == 0, output
    return output.decode(errors="replace")


def test_no_color_under_a_pseudo_terminal(tmp):
    args = ["--nproc_per_node", "2", "sh", "-c", "echo hello"]
    base = clean_env()
    base.pop("NO_COLOR", None)  # the caller's own setting must not decide this test
    colored = run_on_pty(args, base)
    assert "\x1b[" in colored and "[rank1]:" in colored, repr(colored)
    plain = run_on_pty(args, dict(base, NO_COLOR="1"))
    assert "\x1b[" not in plain and "[rank1]:hello" in plain, repr(plain)
    assert "\x1b[" not in run_on_pty(["--color=never"] + args, base)
    # NO_COLOR set but empty does not count (no-color.org); --color=always beats NO_COLOR.
    assert "\x1b[" in run_on_pty(args, dict(base, NO_COLOR=""))
    assert "\x1b[" in run_on_pty(["--color", "always"] + args, dict(base, NO_COLOR="1"))
    r = run(["--color=always"] + args, env=base)  # a pipe
    assert "\x1b[32m[rank0]:\x1b[0mhello" in r.out, r


def test_notices_go_to_stderr_only(tmp):
    r = run(["--nproc_per_node", "2", "--rdzv_conf", "colour=blue", "sh", "-c", "echo out"])
    assert r.rc == 0, r
    assert sorted(r.out.splitlines()) == ["[rank0]:out", "[rank1]:out"], r
    assert "OMP_NUM_THREADS" in r.err and "unknown key 'colour' ignored" in r.err, r


def test_a_closed_stdout_does_not_stop_the_job(tmp):
    # `ddprun ... | head -1`: once head exits, ddprun drops the rest of the output, the workers
    # run to their end, and ddprun exits with their code.
    marker = os.path.join(tmp, "done")
    script = f"i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done; touch {marker}.$RANK"
    r = subprocess.run(["sh", "-c", f'"{DDPRUN}" --no-prefix --nproc_per_node 2 sh -c \'{script}\' '
                        f'| head -1; echo "rc=${{PIPESTATUS[0]}}"'], capture_output=True, text=True,
                       env=clean_env(), timeout=120, executable="/bin/bash")
    assert r.stdout.splitlines() == ["line 0", "rc=0"], r
    assert os.path.exists(marker + ".0") and os.path.exists(marker + ".1")


def test_pet_variables_only_for_torchrun_flags(tmp):
    # PET_DRY_RUN (not a torchrun flag) must not turn a job into a "pass".
    out = os.path.join(tmp, "ran")
    r = run(["sh", "-c", f"touch {out}"], env=clean_env(PET_DRY_RUN="1", PET_EVENTS="-"))
    assert r.rc == 0 and os.path.exists(out) and r.out == "", r
    # torchrun's own flags still read theirs.
    r = run(["sh", "-c", "echo $LOCAL_WORLD_SIZE"],
            env=clean_env(PET_NPROC_PER_NODE="2", PET_LOG_LINE_PREFIX_TEMPLATE="R${rank}:"))
    assert sorted(r.out.splitlines()) == ["R0:2", "R1:2"], r


def test_abbreviations_as_argparse(tmp):
    r = run(["--nproc_per", "2", "--standalon", "--redirect=0", "--no-pre", "sh", "-c", "echo $RANK"])
    assert r.rc == 0 and sorted(r.out.splitlines()) == ["0", "1"], r
    r = run(["--n", "2", "/bin/true"])
    assert r.rc == 2 and r.err.count("\n") == 1 and "ambiguous option: --n could match" in r.err, r
    assert "--nnodes" in r.err and "--nproc_per_node" in r.err and "--node_rank" in r.err, r


def test_print_env_detect_reports_even_when_resolution_fails(tmp):
    env = clean_env(SLURM_JOB_ID="12", SLURM_NNODES="2", SLURM_NODEID="1", SLURM_PROCID="1",
                    SLURM_NTASKS="2", SLURM_JOB_NODELIST="nodeA,nodeB", SLURM_STEP_NODELIST="nodeA,nodeB",
                    SLURM_LOCALID="0")
    r = run(["--print-env-detect", "--nnodes", "3"], env=env)
    assert r.rc == 2, r
    assert "slurm" in r.out.lower(), r  # what was found is printed ...
    assert r.err.startswith("ddprun: ") and r.err.count("\n") == 1, r  # ... then the one-line error


def test_usage_line_and_metavars(tmp):
    r = run(["--help"])
    assert r.rc == 0 and "Usage: ddprun [OPTIONS] PROGRAM [ARGS...]" in r.out, r
    assert "TEXT" not in r.out, r
    assert "--nproc-per-node N|gpu|cpu|auto" in r.out, r  # the underscore spellings: one footnote
    assert "--events FILE|-|fd:N" in r.out, r


def test_generated_completions(tmp):
    r = run(["--print-completion", "bash"])
    assert r.rc == 0, r
    script = os.path.join(tmp, "ddprun.bash")
    with open(script, "w") as f:
        f.write(r.out)
    probe = (f"source {script}; for words in '--nproc' '--nproc_per_node :' '--col' '--color :' "
             "'--nproc-p'; do read -ra w <<< \"$words\"; COMP_WORDS=(ddprun \"${w[@]/:/}\"); "
             "COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _ddprun; echo \"${COMPREPLY[*]}\"; done")
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert out.stdout.splitlines() == ["--nproc_per_node", "gpu cpu auto", "--color",
                                       "auto always never", "--nproc-per-node"], out
    z = run(["--print-completion", "zsh"])
    assert z.rc == 0 and z.out.startswith("#compdef ddprun") and "'--nproc_per_node=[" in z.out, z
    if shutil.which("zsh"):
        check = subprocess.run(["zsh", "-n", "/dev/stdin"], input=z.out, capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


def test_duplicate_filters_and_virtual_local_rank(tmp):
    logs = os.path.join(tmp, "logs")
    r = run(["--nproc_per_node", "2", "--tee", "3", "--log-dir", logs, "--duplicate-stdout-filters",
             "apple,x,,y", "--duplicate_stderr_filters", "pear", "sh", "-c",
             "echo apple $RANK; echo plum; echo 'x,y'; echo pear >&2"])
    assert r.rc == 0, r
    (run_dir,) = os.listdir(logs)
    attempt = os.path.join(logs, run_dir, "attempt_0")
    out_lines = sorted(open(os.path.join(attempt, "filtered_stdout.log")).read().splitlines())
    assert out_lines == ["[default0]:apple 0", "[default0]:x,y", "[default1]:apple 1", "[default1]:x,y"], out_lines
    err_lines = sorted(open(os.path.join(attempt, "filtered_stderr.log")).read().splitlines())
    assert err_lines == ["[default0]:pear", "[default1]:pear"], err_lines
    r = run(["--nproc_per_node", "2", "--virtual-local-rank", "--no-prefix", "sh", "-c",
             "echo $RANK $LOCAL_RANK $CUDA_VISIBLE_DEVICES"], env=clean_env(CUDA_VISIBLE_DEVICES="5,7"))
    assert sorted(r.out.splitlines()) == ["0 0 5", "1 0 7"], r


def test_signals_to_handle(tmp):
    # SIGUSR1 listed: it stops the job (passed to the workers, which die of it); not listed: it is
    # only forwarded (the workers trap it and carry on).
    trap = ("trap 'echo got-usr1; exit 0' USR1; echo ready; "
            "while :; do sleep 0.05; done")
    for listed in (True, False):
        args = [DDPRUN, "--no-prefix", "--nproc_per_node", "2"]
        if listed:
            args += ["--signals-to-handle", "SIGTERM,SIGINT,SIGUSR1"]
        args += ["sh", "-c", trap if not listed else "echo ready; while :; do sleep 0.05; done"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=clean_env(), start_new_session=True)
        try:
            assert proc.stdout.readline() == "ready\n" and proc.stdout.readline() == "ready\n"
            os.kill(proc.pid, signal.SIGUSR1)
            if listed:
                out, err = proc.communicate(timeout=60)
                assert proc.returncode == 128 + signal.SIGUSR1, (proc.returncode, err)
                assert "received SIGUSR1" in err, err
            else:
                lines = [proc.stdout.readline(), proc.stdout.readline()]
                assert lines == ["got-usr1\n", "got-usr1\n"], lines
                out, err = proc.communicate(timeout=60)
                assert proc.returncode == 0, err
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def test_run_path_runs_through_runpy(tmp):
    script = os.path.join(tmp, "show.py")
    with open(script, "w") as f:
        f.write("import sys\nprint(__name__, sys.argv, 'runpy' in sys.modules)\n")
    r = run(["--run-path", "--no-prefix", script, "a", "--b"])
    assert r.rc == 0 and r.out == f"__main__ ['{script}', 'a', '--b'] True\n", r


def test_ddprun_store_cli(tmp):
    store = os.path.join(os.path.dirname(DDPRUN), "ddprun-store")
    if not os.path.exists(store):
        return
    v = subprocess.run([store, "--version"], capture_output=True, text=True, timeout=10)
    assert v.returncode == 0 and v.stdout.startswith("ddprun-store "), v
    for bad in (["--bogus"], ["--port", "x"], ["extra"]):
        b = subprocess.run([store] + bad, capture_output=True, text=True, timeout=10)
        assert b.returncode == 2 and b.stderr.startswith("ddprun-store: ") and b.stderr.count("\n") == 1, b


if __name__ == "__main__":
    main(globals())
